// Mirrored replicas by hand: the replica plan (devices, per-replica batch), communicators
// (in-process CPU groups; NCCL on GPUs), bucketed gradient all-reduce and the parameter broadcast
// and checksums that keep replicas identical.
#pragma once

#include "engine/distribute/communicator.h"
#include "engine/distribute/cpu_communicator.h"
#include "engine/distribute/gradient_bucketer.h"
#include "engine/distribute/replica_plan.h"
#include "engine/distribute/replica_sync.h"
