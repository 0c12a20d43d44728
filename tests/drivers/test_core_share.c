/*
 * test_core_share.c - a GPU's share of the cores near it (drivers/cuda/core_share.c), on hwloc's
 * synthetic topologies and on XML ones with PCI devices, so without a GPU (label unit): GPUs near
 * the same cores each get a contiguous run of whole cores of their own, at least one, every core
 * in one share; too few cores are not split; the GPUs sharing cores are the machine's NVIDIA PCI
 * devices near them, in PCI bus id order, whichever of them CUDA lets this process see.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hwloc.h>

#include "core_share.h"

static hwloc_topology_t load_synthetic(const char *description) {
  hwloc_topology_t topo;
  assert_int_equal(hwloc_topology_init(&topo), 0);
  assert_int_equal(hwloc_topology_set_synthetic(topo, description), 0);
  assert_int_equal(hwloc_topology_load(topo), 0);
  return topo;
}

/* The share as hwloc's list ("16-31"), into buf. */
static const char *share_of(hwloc_topology_t topo, hwloc_const_cpuset_t near, int peers, int index,
                            char *buf, size_t len) {
  hwloc_bitmap_t share = hwloc_bitmap_alloc();
  assert_non_null(share);
  assert_int_equal(cgrt__cuda_core_share(topo, near, peers, index, share), 0);
  assert_true(hwloc_bitmap_list_snprintf(buf, len, share) >= 0);
  hwloc_bitmap_free(share);
  return buf;
}

static void two_gpus_on_every_core_get_a_half_each(void **state) {
  (void)state;
  hwloc_topology_t topo = load_synthetic("pack:2 core:8 pu:2"); /* PUs 0-31, a core = 2 PUs */
  hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(topo);
  char buf[64];
  assert_string_equal(share_of(topo, all, 2, 0, buf, sizeof(buf)), "0-15");
  assert_string_equal(share_of(topo, all, 2, 1, buf, sizeof(buf)), "16-31");
  assert_string_equal(share_of(topo, all, 4, 0, buf, sizeof(buf)), "0-7");
  assert_string_equal(share_of(topo, all, 4, 3, buf, sizeof(buf)), "24-31");
  hwloc_topology_destroy(topo);
}

static void shares_of_one_socket_stay_on_it(void **state) {
  (void)state;
  hwloc_topology_t topo = load_synthetic("pack:2 core:8 pu:2");
  hwloc_obj_t pack = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 1);
  assert_non_null(pack);
  char buf[64];
  assert_string_equal(share_of(topo, pack->cpuset, 2, 0, buf, sizeof(buf)), "16-23");
  assert_string_equal(share_of(topo, pack->cpuset, 2, 1, buf, sizeof(buf)), "24-31");
  hwloc_topology_destroy(topo);
}

static void fewer_cores_than_gpus_are_not_split(void **state) {
  (void)state;
  hwloc_topology_t topo = load_synthetic("core:3 pu:1");
  hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(topo);
  char buf[64];
  for (int i = 0; i < 4; i++)
    assert_string_equal(share_of(topo, all, 4, i, buf, sizeof(buf)), "0-2");
  /* one GPU, or an index that is not one of the peers: nothing to split */
  assert_string_equal(share_of(topo, all, 1, 0, buf, sizeof(buf)), "0-2");
  assert_string_equal(share_of(topo, all, 2, 2, buf, sizeof(buf)), "0-2");
  /* as many cores as GPUs: one each */
  assert_string_equal(share_of(topo, all, 3, 1, buf, sizeof(buf)), "1");
  hwloc_topology_destroy(topo);
}

/*
 * Every count of GPUs up to the number of cores, on a machine whose cores do not divide evenly:
 * the shares are whole cores, contiguous, one core at least, sizes within one, disjoint, and
 * together every core near them.
 */
static void shares_cover_every_core_once(void **state) {
  (void)state;
  hwloc_topology_t topo = load_synthetic("pack:2 core:7 pu:2");
  hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(topo);
  const int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  hwloc_bitmap_t share = hwloc_bitmap_alloc(), seen = hwloc_bitmap_alloc();
  assert_non_null(share);
  assert_non_null(seen);
  for (int peers = 2; peers <= cores; peers++) {
    hwloc_bitmap_zero(seen);
    int lo = cores, hi = 0;
    for (int i = 0; i < peers; i++) {
      assert_int_equal(cgrt__cuda_core_share(topo, all, peers, i, share), 0);
      assert_false(hwloc_bitmap_intersects(share, seen));
      hwloc_bitmap_or(seen, seen, share);
      int n = hwloc_get_nbobjs_inside_cpuset_by_type(topo, share, HWLOC_OBJ_CORE);
      assert_true(n >= 1);
      /* whole cores only: the share's PUs are its cores' PUs */
      assert_int_equal(hwloc_bitmap_weight(share), 2 * n);
      /* contiguous: its cores' logical indices follow one another */
      hwloc_obj_t first = hwloc_get_obj_inside_cpuset_by_type(topo, share, HWLOC_OBJ_CORE, 0);
      hwloc_obj_t last =
          hwloc_get_obj_inside_cpuset_by_type(topo, share, HWLOC_OBJ_CORE, (unsigned)n - 1);
      assert_int_equal((int)(last->logical_index - first->logical_index), n - 1);
      lo = n < lo ? n : lo;
      hi = n > hi ? n : hi;
    }
    assert_true(hwloc_bitmap_isequal(seen, all));
    assert_true(hi - lo <= 1);
  }
  hwloc_bitmap_free(share);
  hwloc_bitmap_free(seen);
  hwloc_topology_destroy(topo);
}

/*
 * A two-socket machine: GPUs 0000:3b and 0000:19 (listed out of order) near socket 0, 0000:9a
 * near socket 1, and on socket 1 too an AMD GPU and an NVIDIA device that is not a GPU (a network
 * function), neither one of ours; a network card at the root.
 */
#define CORE(i, mask)                                                                              \
  "<object type='Core' os_index='" #i "' cpuset='" mask "' complete_cpuset='" mask "'>"            \
  "<object type='PU' os_index='" #i "' cpuset='" mask "' complete_cpuset='" mask "'/></object>\n"
#define PCI(busid, type) "<object type='PCIDev' pci_busid='" busid "' pci_type='" type "'/>\n"
#define H200             "0302 [10de:2335] [10de:18be] a1"
#define MACHINE                                                                                    \
  "<?xml version='1.0' encoding='UTF-8'?>\n"                                                       \
  "<!DOCTYPE topology SYSTEM 'hwloc2.dtd'>\n"                                                      \
  "<topology version='2.0'>\n"                                                                     \
  "<object type='Machine' os_index='0' cpuset='0xf' complete_cpuset='0xf' allowed_cpuset='0xf'"    \
  " nodeset='0x1' complete_nodeset='0x1' allowed_nodeset='0x1'>\n"                                 \
  "<object type='NUMANode' os_index='0' cpuset='0xf' complete_cpuset='0xf' nodeset='0x1'"          \
  " complete_nodeset='0x1'/>\n"

/* clang-format off */
static const char two_sockets_xml[] =
    MACHINE
    "<object type='Package' os_index='0' cpuset='0x3' complete_cpuset='0x3'>\n"
      CORE(0, "0x1") CORE(1, "0x2")
      PCI("0000:3b:00.0", H200)
      PCI("0000:19:00.0", H200)
    "</object>\n"
    "<object type='Package' os_index='1' cpuset='0xc' complete_cpuset='0xc'>\n"
      CORE(2, "0x4") CORE(3, "0x8")
      PCI("0000:9a:00.0", H200)
      PCI("0000:9b:00.0", "0300 [1002:740f] [1002:0c34] 02")
      PCI("0000:9c:00.0", "0200 [10de:1234] [10de:0000] a1")
    "</object>\n"
    PCI("0000:01:00.0", "0200 [15b3:1021] [15b3:0041] 00")
    "</object>\n</topology>\n";

/* The same GPUs where hwloc knows no locality: every one hangs from the machine. */
static const char no_locality_xml[] =
    MACHINE
    CORE(0, "0x1") CORE(1, "0x2") CORE(2, "0x4") CORE(3, "0x8")
    PCI("0000:9a:00.0", H200)
    PCI("0000:3b:00.0", H200)
    PCI("0000:19:00.0", H200)
    "</object>\n</topology>\n";
/* clang-format on */

static hwloc_topology_t load_xml(const char *xml) {
  hwloc_topology_t topo;
  assert_int_equal(hwloc_topology_init(&topo), 0);
  assert_int_equal(cgrt__cuda_keep_gpus(topo), 0); /* as the driver loads it */
  assert_int_equal(hwloc_topology_set_xmlbuffer(topo, xml, (int)strlen(xml) + 1), 0);
  assert_int_equal(hwloc_topology_load(topo), 0);
  return topo;
}

struct found {
  int rc, gpu, index;
  char near[32], peers[32];
};

static struct found peers_of(hwloc_topology_t topo, const char *busid) {
  struct found f;
  hwloc_bitmap_t near = hwloc_bitmap_alloc(), peers = hwloc_bitmap_alloc();
  assert_non_null(near);
  assert_non_null(peers);
  f.rc = cgrt__cuda_gpu_peers(topo, busid, near, peers, &f.gpu, &f.index);
  hwloc_bitmap_list_snprintf(f.near, sizeof(f.near), near);
  hwloc_bitmap_list_snprintf(f.peers, sizeof(f.peers), peers);
  hwloc_bitmap_free(near);
  hwloc_bitmap_free(peers);
  return f;
}

static void gpus_near_one_socket_share_it_in_pci_order(void **state) {
  (void)state;
  hwloc_topology_t topo = load_xml(two_sockets_xml);
  struct found f = peers_of(topo, "0000:19:00.0");
  assert_int_equal(f.rc, 0);
  assert_int_equal(f.gpu, 0);
  assert_int_equal(f.index, 0);
  assert_string_equal(f.near, "0-1");
  assert_string_equal(f.peers, "0-1");
  /* uppercase, as some drivers spell it, and the second of the two */
  f = peers_of(topo, "0000:3B:00.0");
  assert_int_equal(f.gpu, 1);
  assert_int_equal(f.index, 1);
  assert_string_equal(f.peers, "0-1");
  /* alone near socket 1: the AMD GPU and NVIDIA's network function are not peers */
  f = peers_of(topo, "0000:9a:00.0");
  assert_int_equal(f.rc, 0);
  assert_int_equal(f.gpu, 2);
  assert_int_equal(f.index, 0);
  assert_string_equal(f.near, "2-3");
  assert_string_equal(f.peers, "2");
  hwloc_topology_destroy(topo);
}

static void gpus_of_unknown_locality_share_every_core(void **state) {
  (void)state;
  hwloc_topology_t topo = load_xml(no_locality_xml);
  struct found f = peers_of(topo, "0000:9a:00.0");
  assert_int_equal(f.rc, 0);
  assert_string_equal(f.near, "0-3");
  assert_string_equal(f.peers, "0-2");
  assert_int_equal(f.gpu, 2);
  assert_int_equal(f.index, 2);
  char buf[32];
  hwloc_bitmap_t near = hwloc_bitmap_alloc();
  assert_non_null(near);
  hwloc_bitmap_list_sscanf(near, f.near);
  /* 4 cores among 3 GPUs: 1, 1 and 2 */
  assert_string_equal(share_of(topo, near, 3, f.index, buf, sizeof(buf)), "2-3");
  hwloc_bitmap_free(near);
  hwloc_topology_destroy(topo);
}

static void a_gpu_missing_from_pci_is_not_found(void **state) {
  (void)state;
  hwloc_topology_t topo = load_xml(two_sockets_xml);
  struct found f = peers_of(topo, "0000:5e:00.0"); /* no such device */
  assert_int_equal(f.rc, 0);
  assert_int_equal(f.gpu, -1);
  assert_int_equal(f.index, -1);
  f = peers_of(topo, "0000:01:00.0"); /* a network card */
  assert_int_equal(f.gpu, -1);
  hwloc_topology_destroy(topo);
  /* no PCI devices at all (I/O discovery found none: a container without sysfs PCI) */
  topo = load_synthetic("pack:2 core:8 pu:2");
  f = peers_of(topo, "0000:19:00.0");
  assert_int_equal(f.rc, 0);
  assert_int_equal(f.gpu, -1);
  hwloc_topology_destroy(topo);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(two_gpus_on_every_core_get_a_half_each),
      cmocka_unit_test(shares_of_one_socket_stay_on_it),
      cmocka_unit_test(fewer_cores_than_gpus_are_not_split),
      cmocka_unit_test(shares_cover_every_core_once),
      cmocka_unit_test(gpus_near_one_socket_share_it_in_pci_order),
      cmocka_unit_test(gpus_of_unknown_locality_share_every_core),
      cmocka_unit_test(a_gpu_missing_from_pci_is_not_found),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
