#!/bin/sh
# A command-line check for ctest: runs COMMAND and passes only if it exits with EXPECTED_EXIT and its
# output (stdout and stderr together) matches the extended regular expression REGEX. Unlike WILL_FAIL,
# a failure for another reason (a crash, "cannot listen", a missing file) does not pass.
# Usage: check_cli.sh EXPECTED_EXIT REGEX COMMAND [ARGS...]
expected=$1
regex=$2
shift 2
out=$("$@" 2>&1)
code=$?
if [ "$code" != "$expected" ]; then
  printf 'exit status %s, expected %s; output:\n%s\n' "$code" "$expected" "$out"
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
  printf 'output does not match /%s/:\n%s\n' "$regex" "$out"
  exit 1
fi
printf 'ok: exit status %s, output matches /%s/\n' "$code" "$regex"
