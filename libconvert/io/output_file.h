// The one way a command opens a report or data output (validate/convert/diff/repack-experts/
// inspect --json, ckpt-gpu verify --json, hash -o, dump -o): never over an input.
//
// Each command describes what it reads in an InputSet; an output that is the same file
// (st_dev, st_ino: hard links and symlinks too) as an input, or lies inside an input
// directory, is refused before anything is written (Outcome::usage, exit 2, the message
// names both paths). Files are written atomically (io/atomic_file.h); "-" is standard
// output (checked against the inputs too: `> shard` was a shard); an existing device or
// FIFO (/dev/null) is written in place. Every write is checked: a full disk or /dev/full
// is an I/O error (exit 3), never a silent success.
//
// Confidentiality: an output is never readable by more users than the inputs it comes
// from. InputSet::output_mode is the mode every output of a command is created with:
// kOutputFileMode (0644) less the group / other read bits that some input lacks (a 0600
// shard gives 0600 outputs; the umask still applies). convert and repack-experts create
// their files with it too.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/outcome.h"
#include "io/atomic_file.h"

namespace ckpt {


class InputSet {
 public:
  // A file the command reads; a missing path is ignored (the command reports it).
  void add_file(const std::string& path);
  // A checkpoint as given on the command line: a directory (nothing may be written inside
  // it, nor over a file it lists, links followed: Hugging Face cache blobs too), or a file
  // (and, for a shard beside a model.safetensors.index.json, its whole directory).
  void add_checkpoint(const std::string& path);
  // "" when `output` may be written; else why not ("is the input X", "lies inside the
  // input directory X"). "-" checks standard output.
  std::string conflict(const std::string& output) const;
  bool empty() const { return ids_.empty(); }
  // The mode an output of these inputs is created with: 0644 without the group read bit
  // when some input file lacks it (or an input directory lacks group search), likewise for
  // others. Inputs given as files, directories and the files they list all count.
  mode_t output_mode() const;

 private:
  struct Id {
    dev_t dev;
    ino_t ino;
    bool dir;
    std::string path;
  };
  void add(const std::string& path, bool expand_dir);
  void narrow_readers(mode_t st_mode);
  std::vector<Id> ids_;
  mode_t readers_ = 0044;  // group / other read bits every input grants
};

// The mode of a directory created to hold outputs of `file_mode` (0644 -> 0755,
// 0600 -> 0700, 0640 -> 0750): who may not read the files may not list them either.
mode_t output_directory_mode(mode_t file_mode);

// Writes `content` to target ("-" = stdout) unless it conflicts with `inputs`.
// usage: refused (error says why); io: the write failed; ok.
Outcome write_output(const std::string& target, std::string_view content, const InputSet& inputs,
                     std::string& error);

// A streamed output (dump -o, large data): open, write through fd(), commit.
class OutputFile {
 public:
  // `use`: OutputUse::bulk for large data (dump -o): written through io/direct_writer.h.
  OutputFile(std::string target, const InputSet& inputs, OutputUse use = OutputUse::small);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  Outcome open(std::string& error);
  int fd() const { return fd_; }
  bool write(const void* data, size_t len, std::string& error);
  Outcome commit(std::string& error);  // atomic rename / close of a device; stdout is left open
  const std::string& target() const { return target_; }

 private:
  std::string target_;
  const InputSet& inputs_;
  OutputUse use_;
  std::unique_ptr<AtomicOutput> atomic_;
  int fd_ = -1;
  bool own_fd_ = false;
};

}  // namespace ckpt
