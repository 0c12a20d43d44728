# llm.c's GPT-2 trainer through cgrt (tests/hosts/llmc): a C host nobody here wrote. test.sh builds
# unpatched llm.c and the port from the llm.c tree, trains 20 steps at two shapes under none,
# local, transformer_engine and full_iteration, the patched binary's own step and the naive body,
# and checks every step's loss bitwise against llm.c's, the replays, and what diagnose names (label
# gpu). Skipped with its reason (exit 77) without the llm.c tree, nvcc or a CUDA device.
if(CGRT_HAVE_CUDA)
  # LLMC_DIR in the environment at configure time, else the tree beside the checkout.
  if(DEFINED ENV{LLMC_DIR})
    set(llmc_default "$ENV{LLMC_DIR}")
  else()
    set(llmc_default "${CMAKE_SOURCE_DIR}/../shared/hosts/llm.c")
  endif()
  set(CGRT_LLMC_DIR "${llmc_default}" CACHE PATH
      "a karpathy/llm.c tree for the llm.c host test (tests/hosts/llmc)")
  add_test(NAME host_llmc COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(host_llmc PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 1200
    ENVIRONMENT "LLMC_DIR=${CGRT_LLMC_DIR};LLMC_WORK=${CMAKE_CURRENT_BINARY_DIR}/llmc-host")
endif()
