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
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/outcome.h"

namespace ckpt {

class AtomicOutput;

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

 private:
  struct Id {
    dev_t dev;
    ino_t ino;
    bool dir;
    std::string path;
  };
  void add(const std::string& path, bool expand_dir);
  std::vector<Id> ids_;
};

// Writes `content` to target ("-" = stdout) unless it conflicts with `inputs`.
// usage: refused (error says why); io: the write failed; ok.
Outcome write_output(const std::string& target, std::string_view content, const InputSet& inputs,
                     std::string& error);

// A streamed output (dump -o, large data): open, write through fd(), commit.
class OutputFile {
 public:
  OutputFile(std::string target, const InputSet& inputs);
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
  std::unique_ptr<AtomicOutput> atomic_;
  int fd_ = -1;
  bool own_fd_ = false;
};

}  // namespace ckpt
