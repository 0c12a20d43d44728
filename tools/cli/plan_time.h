/*
 * plan_time.h - `cgrt plan --traffic`: token buckets planned by time for a traffic file, offline
 * (issue 43), beside the padded-token plan and the configured set.
 */
#ifndef CGRT_TOOLS_PLAN_TIME_H
#define CGRT_TOOLS_PLAN_TIME_H

/* The step cost model when no measured figures are given (README: Planning by time). */
struct plan_model {
  double step_us;   /* a step's cost that does not depend on its size, either way */
  double launch_us; /* what running a step eagerly costs more than replaying it (its launches) */
  double token_us;  /* a step's work per token it runs at (padded or not) */
};

/* Defaults fitted to issue 43's H200 decode table (README says how). */
#define PLAN_MODEL_STEP_US   500.0
#define PLAN_MODEL_LAUNCH_US 150.0
#define PLAN_MODEL_TOKEN_US  4.5

/*
 * Plans the traffic file at `traffic` by time and by padded tokens under the [inference] options
 * of the configuration at `conf` (NULL: the defaults), with step costs from the file at `costs`
 * (NULL: `model`), and prints the plans side by side (JSON with json). Returns an exit code of
 * tool.h: EXIT_INVALID for a bad traffic or costs file, EXIT_UNUSABLE otherwise on failure.
 */
int plan_traffic(const char *conf, const char *traffic, const char *costs,
                 const struct plan_model *model, int json);

#endif
