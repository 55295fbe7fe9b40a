// Optimizers (SGD with momentum and Nesterov, AdamW), gradient clipping and learning-rate
// schedules with warm-up and linear scaling.
#pragma once

#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
