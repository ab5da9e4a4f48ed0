// What ckptkit keeps in an output directory, OUT/.ckptkit/:
//   lock              flock'ed for the whole run: exclusive by a plain, --resume,
//                     --overwrite or --finalize run, shared by --partition runs
//   locks/<16 hex>.lock  one per shard, exclusive while a partition run owns that shard
//   manifest.json     every file of OUT a whole-output run wrote or is about to write
//   records/          one record per shard (convert/records.h)
// and the rules built on it: which files of OUT ckptkit may remove (only those it wrote:
// the manifest and the records name them), and that an output directory holding a
// checkpoint ckptkit did not write is never written into.
//
// State files are opened like inputs: regular files only, never through a symlink, so a
// FIFO planted at OUT/.ckptkit/manifest.json or at a record is an error, never a hang; and
// every file of OUT is written by renaming a temporary over its name, never in place.
#pragma once

#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

#include "io/output_lock.h"

namespace ckpt {

std::string state_dir(const std::string& out);      // OUT/.ckptkit
std::string records_dir(const std::string& out);    // OUT/.ckptkit/records
std::string out_lock_path(const std::string& out);  // OUT/.ckptkit/lock
std::string shard_lock_path(const std::string& out, const std::string& shard);
std::string manifest_path(const std::string& out);  // OUT/.ckptkit/manifest.json

// Anything besides an empty bookkeeping directory (a run that stopped before writing
// leaves OUT/.ckptkit with a lock file and nothing else: OUT still counts as empty).
bool out_has_content(const std::string& out);
// A previous ckptkit output: its manifest or at least one record exists.
bool is_ckptkit_output(const std::string& out);
// The checkpoint files (*.safetensors, the index, config.json) at OUT's top level; at most 3.
std::vector<std::string> checkpoint_files_in(const std::string& out);

// Relative paths of OUT that earlier runs wrote: the manifest's files and the shards the
// records name (a 0.1.0 output has records only). Paths that would leave OUT, name
// .ckptkit or are not normal relative paths are ignored.
std::set<std::string> files_written_before(const std::string& out);
// (record file path, shard it names) for every record in OUT.
std::vector<std::pair<std::string, std::string>> records_in(const std::string& out);

bool write_manifest(const std::string& out, const std::set<std::string>& files, mode_t mode, std::string& error);

// A file of OUT (shard aside: convert/shard_writer.h): a temporary with `mode`, fsynced and
// renamed over `path` whatever is there (a FIFO at that name is replaced, never opened).
bool write_out_file(const std::string& path, const std::string& content, mode_t mode, std::string& error);

// "" when OUT/.ckptkit and what it holds are what ckptkit writes there: directories that
// are not symlinks, and regular files (manifest, records, locks); else why not, naming the
// entry ("OUT/.ckptkit/manifest.json is a FIFO, not a regular file ...").
std::string state_files_problem(const std::string& out);

// Unlinks OUT/<rel> for each path (a missing one is fine; never a directory, never through
// a directory that leads out of OUT), then fsyncs every directory it removed something
// from. False with the first error.
bool remove_output_files(const std::string& out, const std::vector<std::string>& rel, std::string& error);

// Temporaries left by killed runs (io/atomic_file.h names) anywhere under OUT; with
// `only_for`, only the temporaries whose destination file name is in it.
void remove_stale_temps(const std::string& out, const std::set<std::string>* only_for = nullptr);

// The locks of one run. A whole-output run holds OUT's lock exclusively; a partition
// holds it shared (partitions run side by side) plus each of its shards' locks.
struct OutputLocks {
  FileLock out;
  std::vector<FileLock> shards;
};
enum class LockResult { acquired, busy, error };
LockResult lock_output(const std::string& out, const std::vector<std::string>* partition_shards,
                       const std::string& what, OutputLocks& locks, std::string& message);

}  // namespace ckpt
