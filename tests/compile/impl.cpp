// Compile test: the whole library compiled as C++ with -Werror.
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
int main() {
    tr_ctx *ctx = nullptr;
    if (tr_ctx_create(nullptr, &ctx) != TR_OK) return 1;
    tr_ctx_destroy(ctx);
    return 0;
}
