# Sourced (not run) by measure_check.sh and events_accuracy.sh once their options are read: checks
# the installed tools and prepares the output. Expects: me (the script's name for messages), prefix,
# out, cpus. Sets: run, profile (the tools), db (the profile database in out), pin (a taskset prefix
# for --cpus, or empty); empties out/summary.txt.
run="$prefix/bin/fikit-run" profile="$prefix/bin/fikit-profile"
for tool in "$run" "$profile"; do
  [ -x "$tool" ] || { echo "$me: $tool missing (install FIKIT into $prefix)" >&2; exit 2; }
done
mkdir -p "$out"
db="$out/profiles.db"
pin=""
[ -n "$cpus" ] && command -v taskset >/dev/null && pin="taskset -c $cpus"
: > "$out/summary.txt"
