// Data: TFRecord files (read, write, compressed or not), tf.Example records, the tf.data-style
// Dataset pipeline (files, interleave, shuffle, map, batch, prefetch, cache; in memory with
// Dataset::from_elements) and PipelineBatchSource, which feeds a Dataset to the trainer; image
// decoding (JPEG, PNG), augmentation (random resized crop, flip, resize, normalise) and the
// record-to-{image, label} map the trainer's image pipeline uses (make_image_map).
#pragma once

#include "data/example.h"
#include "data/pipeline/dataset.h"
#include "data/pipeline/image_augment.h"
#include "data/pipeline/image_decode.h"
#include "data/pipeline/image_map.h"
#include "data/pipeline/pipeline_batch_source.h"
#include "data/tensorboard_sink.h"
#include "data/tfrecord_reader.h"
#include "data/tfrecord_writer.h"
