# Sourced by the device scripts: `part NAME SECONDS COMMAND...` runs one part under a time limit, keeps its stdout
# and stderr under $OUT (NAME.jsonl, NAME.err), shows the stderr lines matching $PART_SHOW, and says how it ended,
# so one failing part leaves the others of a device call.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PART_SHOW=${PART_SHOW:-"Error|Traceback"}
part() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "=== $name: $*"
  timeout "$limit" "$@" > >(tee -a "$OUT/$name.jsonl") 2> >(tee -a "$OUT/$name.err" | grep -E "$PART_SHOW" | tail -n 40 >&2)
  echo "=== $name: exit $? after $((SECONDS - t0)) s"
}
