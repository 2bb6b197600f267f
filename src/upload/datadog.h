/* Datadog specifics shared with the tests: container identification from
 * /proc/self/cgroup, as dd-trace does it. */
#ifndef CP_DATADOG_H
#define CP_DATADOG_H

#include <stddef.h>

/* Finds the container id in the text of a /proc/<pid>/cgroup file (a 64-hex
 * docker id, a UUID, or an ECS task id, at the end of a cgroup path,
 * optionally followed by .scope). Returns 1 and the id in out, else 0. */
int cp_datadog_container_id(const char *cgroup_text, char *out, size_t len);

/* The cgroup path of the unified hierarchy (line "0::PATH") or, with cgroup
 * v1, of the memory controller; 1 and the path in out, else 0. */
int cp_datadog_cgroup_path(const char *cgroup_text, char *out, size_t len);

#endif
