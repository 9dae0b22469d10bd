#include <stdio.h>
#include "cli/commands.h"
// Not built yet: this command is being written (see the open issues).
int cmd_tokenize(int argc, char **argv) { fprintf(stderr, "blockspec: this command is not available yet\n"); return 1; }
