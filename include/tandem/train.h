// The Trainer: one thread per replica, a Task for the loss and metrics, Callbacks to watch and
// steer the run, checkpoints and exact resume, the run configuration, metric writers; the image
// classification and next-token (language) tasks.
#pragma once

#include "engine/train/callback.h"
#include "engine/train/callbacks.h"
#include "engine/train/checkpoint/checkpoint.h"
#include "engine/train/classification_task.h"
#include "engine/train/config.h"
#include "engine/train/evaluation.h"
#include "engine/train/language_task.h"
#include "engine/train/metrics_csv_sink.h"
#include "engine/train/stop_signals.h"
#include "engine/train/task.h"
#include "engine/train/tasks.h"
#include "engine/train/trainer.h"
