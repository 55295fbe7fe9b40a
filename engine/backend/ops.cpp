#include "engine/backend/ops.h"
