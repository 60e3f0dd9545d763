/* Built without nvcc: no GPU kernel (kernel.h). The cuda backend then runs
 * the data-moving collectives with copies and refuses the reducing ones. */
#include "config.h"

#include "coll/kernel.h"

const unsigned char *const coll_kernel_image = NULL;
const size_t coll_kernel_image_size = 0;
