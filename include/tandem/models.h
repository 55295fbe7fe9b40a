// Models by name: the built-in ResNets, MLP and small CNN, and register_model for a program's own.
#pragma once

#include "models/registry.h"
