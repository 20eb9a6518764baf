/* The host CPU for a benchmark's "machine" field: "<model name>, <N> cores"
 * from /proc/cpuinfo and sysconf. */
#ifndef FATHOM_BENCH_MACHINE_H
#define FATHOM_BENCH_MACHINE_H

#include <stdio.h>
#include <string.h>
#include <string>
#include <unistd.h>

static std::string bench_host_cpu(void) {
    std::string model = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) {
                const char *c = strchr(line, ':');
                if (c) {
                    model = c + 1 + (c[1] == ' ');
                    while (!model.empty() && (model.back() == '\n' || model.back() == ' ')) model.pop_back();
                }
                break;
            }
        fclose(f);
    }
    return model + ", " + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " cores";
}

#endif
