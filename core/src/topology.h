/* topology.h - which CPU cores are near a GPU (hwloc), and binding the launching thread there. */
#ifndef CGRT_TOPOLOGY_H
#define CGRT_TOPOLOGY_H

#include <stddef.h>

/*
 * Writes the cores near CUDA device `device` as a list ("0-15,32-47") into cores. Errors
 * (CGRT_E_UNSUPPORTED without CUDA, CGRT_E_DEVICE otherwise) leave a sentence in err.
 */
int cgrt__cores_near_gpu(int device, char *cores, size_t len, char *err, size_t errlen);

/* Binds the calling thread to the cores near `device` and writes them into cores. */
int cgrt__bind_near_gpu(int device, char *cores, size_t len, char *err, size_t errlen);

#endif
