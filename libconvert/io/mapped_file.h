// Legacy name of InputFile (io/input_file.h): inputs are read with pread, never mapped.
#pragma once

#include "io/input_file.h"

namespace ckpt {

using MappedFile = InputFile;

}  // namespace ckpt
