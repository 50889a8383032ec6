/* Compile test: the whole library as strict C99 with -Werror. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include "tinyrec.h" /* a second include must be harmless */
int main(void) {
    tr_ctx *ctx = NULL;
    if (tr_ctx_create(NULL, &ctx) != TR_OK) return 1;
    tr_ctx_destroy(ctx);
    return 0;
}
