/* A translation unit that sees only the declarations. */
#include "tinyrec.h"
int user_function(void);
int user_function(void) { return tr_status_string(TR_OK)[0] == 'o' ? 0 : 1; }
