/* PFLlib client files (.npz): the input is the file, loaded as both files
 * of a one-client PFLlib folder (pfllib_folder.h). Mutations mostly break
 * the zip's CRC or its deflate stream; the npy harness reaches the pickle
 * behind them. */
#include "pfllib_folder.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_folder(data, size);
    return 0;
}
