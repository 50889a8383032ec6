#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
