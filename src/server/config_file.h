/* config_file: the server's configuration file, fed through the option table.
 *
 * Format: one setting per line, "key = value", where key is an option's long name without
 * the dashes (port = 8998). Blank lines and lines starting with # are skipped; a comment
 * must be on its own line, so a prompt may contain '#'. A value may be wrapped in double
 * quotes (inside them \" and \\ stand for " and \). A flag is "key = true", "key = false" or
 * a bare "key". Later lines override earlier ones, and the command line overrides the file
 * because main parses argv after loading it. */
#ifndef PP_SERVER_CONFIG_FILE_H
#define PP_SERVER_CONFIG_FILE_H

#include "server/options.h"

/* The FILE of a "--config FILE" or "--config=FILE" in argv (the last one wins), or NULL.
 * Looks at nothing else: the full parse comes after the file is loaded. */
const char *config_file_find_arg(int argc, char **argv);

/* Applies every setting in the file at path to o. Stops at the first problem: err then
 * reads "path:line: what" and names the key (unknown key, bad value, malformed line). */
int config_file_load(server_options *o, const char *path, char *err);

#endif
