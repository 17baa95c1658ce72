/* PFLlib client files, past the zip: the input is data.npy (its header and
 * the pickle), which the harness stores in a zip with the right CRC-32 and
 * loads as both files of a one-client PFLlib folder (pfllib_folder.h), so
 * that every mutation reaches the header parser and the unpickler. */
#include "npz_zip.h" /* tests/ */
#include "pfllib_folder.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t zip_size;
    uint8_t *zip = npz_zip_stored(data, size, &zip_size);
    if (!zip) fuzz_fail("npy", "out of memory in the harness");
    load_folder(zip, zip_size);
    free(zip);
    return 0;
}
