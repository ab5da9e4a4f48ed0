#!/usr/bin/env bash
# Reading an input that is not in the page cache (issue 33): buffered reads (what ckpt does:
# large preads, kernel read-ahead, io/read_ahead.h) against O_DIRECT reads, one stream and
# four streams in flight, 8 MiB requests. Before every run the file is dropped from the page
# cache (posix_fadvise DONTNEED: its pages are clean, so they go). Best of 3, GB/s.
# Usage: bench/read_direct.sh FILE   (a few GiB, e.g. the shard bench/write_direct.sh makes)
set -euo pipefail
FILE=$1
bytes=$(stat -c %s "$FILE")
blocks=$(( (bytes + (8 << 20) - 1) / (8 << 20) ))
quarter=$(( (blocks + 3) / 4 ))

drop() { python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$FILE"; }
# One or four dd streams over the file with iflag=$2 ("" or direct).
read_streams() {
  local streams=$1 flag=$2 i
  if [ "$streams" = 1 ]; then
    dd if="$FILE" of=/dev/null bs=8M ${flag:+iflag=$flag} status=none
  else
    for i in 0 1 2 3; do
      dd if="$FILE" of=/dev/null bs=8M skip=$((i * quarter)) count=$quarter ${flag:+iflag=$flag} status=none &
    done
    wait
  fi
}
best() {
  local b="" t0 t1
  for _ in 1 2 3; do
    drop
    t0=$(date +%s.%N)
    read_streams "$@"
    t1=$(date +%s.%N)
    b=$(python3 -c "t=$t1-$t0; b='$b'; print(min(t, float(b)) if b else t)")
  done
  python3 -c "print(f'{$bytes / $b / 1e9:.2f}')"
}
echo "== reading $(python3 -c "print(f'{$bytes/1e9:.2f}')") GB not in the page cache ($FILE), 8 MiB requests, GB/s best of 3"
echo "buffered, 1 stream (ckpt today): $(best 1 "")"
echo "buffered, 4 streams:             $(best 4 "")"
echo "O_DIRECT, 1 stream:              $(best 1 direct)"
echo "O_DIRECT, 4 streams in flight:   $(best 4 direct)"
