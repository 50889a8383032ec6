/* Links against tinyrec.c (the implementation) and user.c (declarations only). */
#include <stdio.h>
#include <string.h>
#include "tinyrec.h"
int user_function(void);
int main(void) {
    if (strcmp(tr_version_string(), TINYREC_VERSION_STRING) != 0) return 1;
    return user_function();
}
