# llm.c's GPT-2 trainer through cgrt (tests/hosts/llmc): a C host nobody here wrote. test.sh builds
# unpatched llm.c and the port from the llm.c tree, trains 20 steps at two shapes under none,
# local, transformer_engine and full_iteration, the patched binary's own step and the naive body,
# and checks every step's loss bitwise against llm.c's, the replays, and what diagnose names (label
# gpu). Skipped with its reason (exit 77) without the llm.c tree, nvcc or a CUDA device.
# host_llmc_2gpu (label multigpu): the same on two GPUs (test2.sh).
if(CGRT_HAVE_CUDA)
  # LLMC_DIR in the environment at configure time, else the tree beside the checkout, else one in
  # the checkout's shared/ (as run.sh looks: a GPU machine gets shared/ with the checkout, not
  # ../shared; without either tree both tests skip, saying so).
  if(DEFINED ENV{LLMC_DIR})
    set(llmc_default "$ENV{LLMC_DIR}")
  elseif(NOT IS_DIRECTORY "${CMAKE_SOURCE_DIR}/../shared/hosts/llm.c"
         AND IS_DIRECTORY "${CMAKE_SOURCE_DIR}/shared/hosts/llm.c")
    set(llmc_default "${CMAKE_SOURCE_DIR}/shared/hosts/llm.c")
  else()
    set(llmc_default "${CMAKE_SOURCE_DIR}/../shared/hosts/llm.c")
  endif()
  set(CGRT_LLMC_DIR "${llmc_default}" CACHE PATH
      "a karpathy/llm.c tree for the llm.c host test (tests/hosts/llmc)")
  add_test(NAME host_llmc COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(host_llmc PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 1200
    RESOURCE_LOCK llmc_work
    ENVIRONMENT "LLMC_DIR=${CGRT_LLMC_DIR};LLMC_WORK=${CMAKE_CURRENT_BINARY_DIR}/llmc-host")
  # The same trainer on two GPUs, llm.c's NCCL data parallelism (test2.sh): losses and each rank's
  # checkpoint bitwise llm.c's under every backend, ZeRO 0 and 1, and the two failure drills.
  # Skipped with its reason on fewer than two GPUs. The two tests share the work folder (shards,
  # stepbits.so), so they take turns (RESOURCE_LOCK).
  add_test(NAME host_llmc_2gpu COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test2.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(host_llmc_2gpu PROPERTIES LABELS multigpu SKIP_RETURN_CODE 77 TIMEOUT 1500
    RESOURCE_LOCK llmc_work
    ENVIRONMENT "LLMC_DIR=${CGRT_LLMC_DIR};LLMC_WORK=${CMAKE_CURRENT_BINARY_DIR}/llmc-host")
endif()
# bench.sh's verdict (no backend slower than llm.c, losses bitwise) on hand-made step times, with
# a fake run.sh, cgrt and nvidia-smi: no GPU, no llm.c tree (label unit).
add_test(NAME llmc_bench_verdict COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_bench_verdict.sh)
set_tests_properties(llmc_bench_verdict PROPERTIES LABELS unit)
