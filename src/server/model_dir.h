/* model_dir: where the server looks for the model when --weights is not given.
 *
 * The directories are --models-dir when set, else the per-user one
 * ($XDG_DATA_HOME/personaplex/models, ~/.local/share/personaplex/models) and then the
 * system one (/var/lib/personaplex/models, the systemd unit's StateDirectory). In each,
 * the checkpoints tools/fetch-weights.sh downloads are tried smallest first, so a plain
 * `fetch-weights.sh && personaplex-server` works; --weights picks another explicitly. */
#ifndef PP_SERVER_MODEL_DIR_H
#define PP_SERVER_MODEL_DIR_H

#include <stddef.h>

#define MODEL_DIR_SYSTEM "/var/lib/personaplex/models"

/* Fills out with the first checkpoint found. PP_ENOTFOUND names the places looked in. */
int model_dir_find_weights(const char *models_dir, char *out, size_t cap, char *err);

#endif
