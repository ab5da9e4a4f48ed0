#!/usr/bin/env bash
# End-to-end test of deploy/slurm/convert.sbatch on a real one-node Slurm cluster.
#
# Usage: slurm_test.sh CKPT SOURCE_DIR [FIXTURES_DIR]   (default SOURCE_DIR/tests/fixtures)
# Needs root and Debian's slurmctld, slurmd and munge (`make deps-slurm`); skips with
# exit code 77 (CTest SKIP_RETURN_CODE) otherwise. Starts munged, slurmctld and slurmd
# on localhost (private socket, ports and spool under a temp dir; no slurmdbd), then:
#   1. an N=3 array job + a finalize job with --dependency=afterok: the output equals a
#      single-process conversion, every file byte for byte;
#   2. the same with array task 1 cancelled on purpose: the dependent finalize never
#      runs; a finalize job submitted anyway refuses, naming the shards and partition
#      1/3; resubmitting index 1 alone and then finalize completes the job, byte-identical;
#   3. deploy/slurm/validate.sbatch: N deep-validation tasks + merge == one process.
# Every daemon it started is stopped on exit (trap).
set -uo pipefail

CKPT=$(readlink -f "$1")
SOURCE=$(readlink -f "$2")
FIXTURES=$(readlink -f "${3:-$SOURCE/tests/fixtures}")
IN=$FIXTURES/oracle/dsv4-tiny
SBATCH_SCRIPT=$SOURCE/deploy/slurm/convert.sbatch
N=3

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root to start slurmctld/slurmd/munged"
for bin in munged slurmctld slurmd sbatch squeue scontrol scancel; do
  command -v "$bin" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v "$bin" >/dev/null 2>&1 ||
    skip "$bin not installed (make deps-slurm installs slurmctld slurmd munge)"
done
export PATH=$PATH:/usr/sbin

D=$(mktemp -d /tmp/ckpt-slurm.XXXXXX)
chmod 755 "$D"
PIDS=()
cleanup() {
  local pid
  if [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ]; then
    scancel --quiet --user=root 2>/dev/null || true
  fi
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$D"
}
trap cleanup EXIT
fail() {
  echo "--- scontrol"; scontrol -o show job 2>/dev/null | grep -o "JobId=[^ ]* .*JobState=[A-Z_]*" | cut -c1-200
  echo "FAIL: $*"
  for f in "$D"/logs/*.out; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  echo "--- slurmctld.log (tail)"; tail -20 "$D/slurmctld.log" 2>/dev/null
  echo "--- slurmd.log (tail)"; tail -20 "$D/slurmd.log" 2>/dev/null
  exit 1
}

# --- munge: a private key and socket ------------------------------------------------
mkdir -p "$D/munge" "$D/state" "$D/spool" "$D/logs" "$D/work"
chmod 700 "$D/munge"
dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$D/munge/munge.key"
munged --foreground --force --key-file="$D/munge/munge.key" --socket="$D/munge/munge.sock" \
  --pid-file="$D/munge/munged.pid" --log-file="$D/munge/munged.log" --seed-file="$D/munge/munge.seed" \
  >"$D/munge/munged.stdout" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [ -S "$D/munge/munge.sock" ] && break; sleep 0.1; done
[ -S "$D/munge/munge.sock" ] || fail "munged did not start: $(cat "$D/munge/munged.log" 2>/dev/null)"

# --- a one-node cluster on localhost ------------------------------------------------
PORT=$((20000 + RANDOM % 20000))
cat > "$D/slurm.conf" <<CONF
ClusterName=ckpttest
SlurmctldHost=localhost
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.sock
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=3600
SlurmdTimeout=30
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$D/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" >"$D/slurmctld.stdout" 2>&1 &
PIDS+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >"$D/slurmd.stdout" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
  sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)' && break
  sleep 0.2
done
sinfo -h -o '%T' 2>/dev/null | grep -qE '^idle' || fail "the node did not come up idle: $(sinfo 2>&1)"
echo "one-node Slurm cluster up on port $PORT"

# --- helpers ------------------------------------------------------------------------
# state JOBID: the JobState of a job (an array: one line per task).
state() { scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
# wait_gone JOBID...: until squeue no longer lists them (at most 60 s).
wait_gone() {
  for _ in $(seq 300); do
    [ -z "$(squeue -h -j "$(IFS=,; echo "$*")" 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  fail "jobs $* did not finish: $(squeue 2>&1)"
}
submit() { sbatch --parsable --mem=200M --cpus-per-task=1 --chdir="$D/work" --output="$D/logs/%x-%A_%a.out" --export=ALL,CKPT="$CKPT",CKPT_PARTITIONS=$N "$@"; }
same_tree() {  # every file except the .ckptkit records, byte for byte
  local a=$1 b=$2 f
  diff <(cd "$a" && find . -path ./.ckptkit -prune -o -type f -print | sort) \
       <(cd "$b" && find . -path ./.ckptkit -prune -o -type f -print | sort) || return 1
  while read -r f; do cmp -s "$a/$f" "$b/$f" || { echo "differs: $f"; return 1; }; done \
    < <(cd "$a" && find . -path ./.ckptkit -prune -o -type f -print)
}

"$CKPT" convert -q "$IN" "$D/single" >/dev/null || fail "single-process conversion"

# --- 1. array + finalize with afterok -----------------------------------------------
OUT=$D/out
jid=$(submit --job-name=part --array=0-$((N - 1)) "$SBATCH_SCRIPT" "$IN" "$OUT") || fail "sbatch array"
fin=$(submit --job-name=final --dependency=afterok:"$jid" "$SBATCH_SCRIPT" "$IN" "$OUT") || fail "sbatch finalize"
echo "array job $jid ($N tasks), finalize job $fin"
wait_gone "$jid" "$fin"
[ "$(state "$jid" | sort -u)" = COMPLETED ] || fail "array tasks: $(state "$jid" | tr '\n' ' ')"
[ "$(state "$fin")" = COMPLETED ] || fail "finalize: $(state "$fin")"
same_tree "$OUT" "$D/single" || fail "the Slurm output differs from the single-process output"
echo "ok: $N array tasks + finalize == single process, every file byte for byte"

# --- 2. one task cancelled: finalize refuses, resubmitting that index completes ----
OUT=$D/out2
jid=$(submit --job-name=part2 --hold --array=0-$((N - 1)) "$SBATCH_SCRIPT" "$IN" "$OUT") || fail "sbatch array"
fin=$(submit --job-name=final2 --dependency=afterok:"$jid" --kill-on-invalid-dep=yes "$SBATCH_SCRIPT" "$IN" "$OUT") ||
  fail "sbatch finalize"
scancel "${jid}_1" || fail "scancel ${jid}_1"
scontrol release "$jid" >/dev/null || fail "release $jid"
wait_gone "$jid" "$fin"
[ ! -e "$D/logs/part2-${jid}_1.out" ] || fail "task 1 ran although it was cancelled"
[ "$(state "$jid" | sort -u)" = COMPLETED ] || fail "tasks 0 and 2: $(state "$jid" | tr '\n' ' ')"
[ "$(state "$fin")" = CANCELLED ] || fail "the dependent finalize job should never run, it is $(state "$fin")"
echo "ok: array task ${jid}_1 cancelled; the afterok finalize job $fin was cancelled (dependency never satisfied)"
ref=$(submit --job-name=final2-anyway "$SBATCH_SCRIPT" "$IN" "$OUT") || fail "sbatch finalize"
wait_gone "$ref"
[ "$(state "$ref")" = FAILED ] || fail "finalize with a missing partition should fail, it is $(state "$ref")"
log=$(cat "$D"/logs/final2-anyway-"$ref"_*.out)
for shard in $(cd "$D/single" && ls model-*.safetensors); do
  if [ ! -f "$OUT/$shard" ]; then
    grep -q "CONVERT_SHARD_MISSING $shard: shard $shard of partition 1/$N" <<<"$log" || fail "finalize did not name $shard"
  fi
done
grep -q "rerun partitions 1 of $N" <<<"$log" || fail "finalize did not name the partition to rerun"
[ ! -e "$OUT/config.json" ] && [ ! -e "$OUT/model.safetensors.index.json" ] || fail "finalize wrote final files"
echo "ok: finalize refused: $(grep -c CONVERT_SHARD_MISSING <<<"$log") shards of partition 1/$N named; nothing final written"
re=$(submit --job-name=part2-retry --array=1 "$SBATCH_SCRIPT" "$IN" "$OUT") || fail "resubmit index 1"
fin=$(submit --job-name=final2-retry --dependency=afterok:"$re" "$SBATCH_SCRIPT" "$IN" "$OUT") || fail "sbatch finalize"
wait_gone "$re" "$fin"
[ "$(state "$re")" = COMPLETED ] && [ "$(state "$fin")" = COMPLETED ] || fail "resubmission: $(state "$re") / $(state "$fin")"
same_tree "$OUT" "$D/single" || fail "the repaired output differs from the single-process output"
echo "ok: index 1 resubmitted alone, finalize completed; output == single process, every file byte for byte"
# --- 3. deep validation: array + merge == single process -----------------------------
REP=$D/reports
jid=$(submit --job-name=val --array=0-$((N - 1)) "$SOURCE/deploy/slurm/validate.sbatch" "$IN" "$REP") || fail "sbatch validate"
mrg=$(submit --job-name=merge --dependency=afterok:"$jid" "$SOURCE/deploy/slurm/validate.sbatch" "$IN" "$REP") ||
  fail "sbatch merge"
wait_gone "$jid" "$mrg"
[ "$(state "$mrg")" = COMPLETED ] || fail "merge: $(state "$mrg")"
"$CKPT" validate -q --deep --json "$D/single.json" "$IN" >/dev/null || fail "single-process validation"
no_seconds() { sed -E 's/"seconds":[^,}]*/"seconds":0/' "$1"; }
cmp -s <(no_seconds "$REP/report.json") <(no_seconds "$D/single.json") || fail "merged report != single-process report"
echo "ok: $N deep-validation tasks + merge == single-process report (byte for byte, seconds aside)"
echo "PASS"
