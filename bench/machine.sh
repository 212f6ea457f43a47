# Sourced by the benchmarks in bench/: the machine a figure was measured on, printed beside it.
#   machine_line before|after   one line: CPU model, cores, load average (1, 5, 15 min)
#   machine_json                the same as a JSON object (without the when)
# Load before and after tells a reader whether something else ran beside the measurement.
machine_cpu() { sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1; }
machine_load() { cut -d' ' -f1-3 /proc/loadavg; }
machine_line() { echo "machine ($1): $(machine_cpu), $(nproc) cores, load average $(machine_load)"; }
machine_json() {
    printf '{"cpu": "%s", "cores": %s, "load": "%s"}\n' "$(machine_cpu)" "$(nproc)" "$(machine_load)"
}
