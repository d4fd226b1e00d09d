// The precompiled header: the heavy LibTorch headers every layer uses.
#pragma once
#include <torch/torch.h>
