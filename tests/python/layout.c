/*
 * layout.c - prints the size of every public struct the Python package mirrors with ctypes, and
 * the offset of each field, as the C compiler lays them out: "cgrt_ctx 152" and
 * "cgrt_ctx.stream 16" lines. python/tests/test_runtime.py (test_ctypes_mirrors_match_the_c_layout)
 * compares them with the mirrors.
 */
#include <stddef.h>
#include <stdio.h>

#include "cgrt/cgrt.h"

#define SIZE(t)     printf("%s %zu\n", #t, sizeof(t))
#define FIELD(t, f) printf("%s.%s %zu\n", #t, #f, offsetof(t, f))

int main(void) {
  SIZE(cgrt_buffer);
  FIELD(cgrt_buffer, ptr);
  FIELD(cgrt_buffer, bytes);
  FIELD(cgrt_buffer, access);
  FIELD(cgrt_buffer, name);

  SIZE(cgrt_ctx);
  FIELD(cgrt_ctx, struct_size);
  FIELD(cgrt_ctx, rt);
  FIELD(cgrt_ctx, stream);
  FIELD(cgrt_ctx, comm);
  FIELD(cgrt_ctx, cp_size);
  FIELD(cgrt_ctx, phase);
  FIELD(cgrt_ctx, mode);
  FIELD(cgrt_ctx, microbatch);
  FIELD(cgrt_ctx, step);
  FIELD(cgrt_ctx, tokens);
  FIELD(cgrt_ctx, padded_tokens);
  FIELD(cgrt_ctx, num_sequences);
  FIELD(cgrt_ctx, padded_sequences);
  FIELD(cgrt_ctx, cu_seqlens);
  FIELD(cgrt_ctx, cu_seqlens_padded);
  FIELD(cgrt_ctx, user);
  FIELD(cgrt_ctx, buffers);
  FIELD(cgrt_ctx, num_buffers);
  FIELD(cgrt_ctx, cp_rank);

  SIZE(cgrt_args);
  FIELD(cgrt_args, struct_size);
  FIELD(cgrt_args, key);
  FIELD(cgrt_args, microbatch);
  FIELD(cgrt_args, buffers);
  FIELD(cgrt_args, num_buffers);

  SIZE(cgrt_module_desc);
  FIELD(cgrt_module_desc, struct_size);
  FIELD(cgrt_module_desc, name);
  FIELD(cgrt_module_desc, kind);
  FIELD(cgrt_module_desc, layer);
  FIELD(cgrt_module_desc, forward);
  FIELD(cgrt_module_desc, backward);
  FIELD(cgrt_module_desc, user);
  FIELD(cgrt_module_desc, no_cp_comm);
  FIELD(cgrt_module_desc, stages_inputs);

  SIZE(cgrt_step_desc);
  FIELD(cgrt_step_desc, struct_size);
  FIELD(cgrt_step_desc, phase);
  FIELD(cgrt_step_desc, tokens);
  FIELD(cgrt_step_desc, seqlens);
  FIELD(cgrt_step_desc, num_sequences);
  FIELD(cgrt_step_desc, cp_size);
  FIELD(cgrt_step_desc, microbatches);
  FIELD(cgrt_step_desc, buffers);
  FIELD(cgrt_step_desc, num_buffers);
  FIELD(cgrt_step_desc, prepare);
  FIELD(cgrt_step_desc, body);
  FIELD(cgrt_step_desc, user);
  FIELD(cgrt_step_desc, stages_inputs);

  SIZE(cgrt_step_report);
  FIELD(cgrt_step_report, struct_size);
  FIELD(cgrt_step_report, mode);
  FIELD(cgrt_step_report, padded_tokens);
  FIELD(cgrt_step_report, calls_eager);
  FIELD(cgrt_step_report, calls_captured);
  FIELD(cgrt_step_report, calls_replayed);
  FIELD(cgrt_step_report, graphs_built);
  FIELD(cgrt_step_report, fallbacks);
  FIELD(cgrt_step_report, host_ns);
  FIELD(cgrt_step_report, copy_bytes);

  SIZE(cgrt_stats);
  FIELD(cgrt_stats, struct_size);
  FIELD(cgrt_stats, steps);
  FIELD(cgrt_stats, steps_by_mode);
  FIELD(cgrt_stats, calls_by_mode);
  FIELD(cgrt_stats, captures);
  FIELD(cgrt_stats, instantiations);
  FIELD(cgrt_stats, updates);
  FIELD(cgrt_stats, update_refusals);
  FIELD(cgrt_stats, rebinds);
  FIELD(cgrt_stats, evictions);
  FIELD(cgrt_stats, fallbacks);
  FIELD(cgrt_stats, live_graphs);
  FIELD(cgrt_stats, padding_tokens); /* a union with its old name padded_tokens */
  FIELD(cgrt_stats, capture_ns);
  FIELD(cgrt_stats, instantiate_ns);
  FIELD(cgrt_stats, graph_mem_used);
  FIELD(cgrt_stats, graph_mem_reserved);
  FIELD(cgrt_stats, real_tokens);
  FIELD(cgrt_stats, bucket_changes);
  FIELD(cgrt_stats, num_buckets);
  FIELD(cgrt_stats, buckets);
  FIELD(cgrt_stats, graph_bytes);
  FIELD(cgrt_stats, graph_pool_bytes);
  FIELD(cgrt_stats, graph_exec_bytes);
  FIELD(cgrt_stats, graph_pool_idle);
  FIELD(cgrt_stats, graph_bytes_peak);
  FIELD(cgrt_stats, graph_nodes);
  FIELD(cgrt_stats, memory_budget);
  FIELD(cgrt_stats, budget_eager);
  FIELD(cgrt_stats, budget_evictions);
  FIELD(cgrt_stats, verifications);
  FIELD(cgrt_stats, verify_mismatches);
  FIELD(cgrt_stats, verify_skipped);
  FIELD(cgrt_stats, findings);
  FIELD(cgrt_stats, comm_waits);
  FIELD(cgrt_stats, rebind_copy_keys);
  FIELD(cgrt_stats, rebind_eager_keys);
  FIELD(cgrt_stats, copy_bytes);
  FIELD(cgrt_stats, staged_bytes);
  FIELD(cgrt_stats, rebind_variant_keys);
  FIELD(cgrt_stats, eager_phase_steps);
  FIELD(cgrt_stats, timed_steps);
  FIELD(cgrt_stats, time_probe_steps);
  FIELD(cgrt_stats, time_eager_steps);
  FIELD(cgrt_stats, time_exact_steps);
  FIELD(cgrt_stats, time_eager_counts);
  FIELD(cgrt_stats, time_exact_counts);
  FIELD(cgrt_stats, time_implied_counts);
  FIELD(cgrt_stats, time_rare_refused);
  FIELD(cgrt_stats, queue_waits);
  FIELD(cgrt_stats, queue_wait_ns);
  FIELD(cgrt_stats, sync_guard_waits);
  FIELD(cgrt_stats, sync_guard_late);
  FIELD(cgrt_stats, unrepeated_units);

  SIZE(cgrt_open_options);
  FIELD(cgrt_open_options, struct_size);
  FIELD(cgrt_open_options, path);
  FIELD(cgrt_open_options, ini);
  FIELD(cgrt_open_options, ini_name);
  FIELD(cgrt_open_options, log);
  FIELD(cgrt_open_options, log_user);
  FIELD(cgrt_open_options, stream);

  SIZE(cgrt_capture_hooks);
  FIELD(cgrt_capture_hooks, struct_size);
  FIELD(cgrt_capture_hooks, begin);
  FIELD(cgrt_capture_hooks, end);
  FIELD(cgrt_capture_hooks, user);
  FIELD(cgrt_capture_hooks, pool_allocator);

  SIZE(cgrt_finding);
  FIELD(cgrt_finding, struct_size);
  FIELD(cgrt_finding, kind);
  FIELD(cgrt_finding, broke_capture);
  FIELD(cgrt_finding, call);
  FIELD(cgrt_finding, result);
  FIELD(cgrt_finding, result_name);
  FIELD(cgrt_finding, what);
  FIELD(cgrt_finding, step);
  FIELD(cgrt_finding, caller);
  FIELD(cgrt_finding, detail);
  FIELD(cgrt_finding, count);

  SIZE(cgrt_backend_info);
  FIELD(cgrt_backend_info, struct_size);
  FIELD(cgrt_backend_info, name);
  FIELD(cgrt_backend_info, path);
  FIELD(cgrt_backend_info, caps);
  FIELD(cgrt_backend_info, phases);

  SIZE(cgrt_graph_info);
  FIELD(cgrt_graph_info, struct_size);
  FIELD(cgrt_graph_info, name);
  FIELD(cgrt_graph_info, module);
  FIELD(cgrt_graph_info, dir);
  FIELD(cgrt_graph_info, microbatch);
  FIELD(cgrt_graph_info, phase);
  FIELD(cgrt_graph_info, shape);
  FIELD(cgrt_graph_info, extra);
  FIELD(cgrt_graph_info, bytes);
  FIELD(cgrt_graph_info, pool_bytes);
  FIELD(cgrt_graph_info, pool_used_bytes);
  FIELD(cgrt_graph_info, exec_bytes);
  FIELD(cgrt_graph_info, alloc_bytes);
  FIELD(cgrt_graph_info, nodes);
  FIELD(cgrt_graph_info, capture_ns);
  FIELD(cgrt_graph_info, instantiate_ns);
  FIELD(cgrt_graph_info, last_use);
  FIELD(cgrt_graph_info, replays);

  SIZE(cgrt_release_report);
  FIELD(cgrt_release_report, struct_size);
  FIELD(cgrt_release_report, graphs);
  FIELD(cgrt_release_report, bytes);
  FIELD(cgrt_release_report, nodes);
  FIELD(cgrt_release_report, pool_reserved_before);
  FIELD(cgrt_release_report, pool_reserved_after);
  return 0;
}
