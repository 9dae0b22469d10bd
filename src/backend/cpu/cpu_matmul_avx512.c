// placeholder, filled below
#include "backend/cpu/cpu.h"
const bs_mm_kernel bs_mm_avx512[3] = {{0}}, bs_mm_avx512bf16[3] = {{0}};
