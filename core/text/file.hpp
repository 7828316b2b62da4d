#pragma once

/// Reading the files people and peers name (configs, placement problems,
/// scenarios, tokenizer files, keys, token files) without trusting them:
/// only regular files (a FIFO would block forever, /dev/zero never ends, a
/// directory is no document), at most a stated number of bytes, and an
/// error that names the file and the problem. Files holding secrets
/// (keys, tokens) must not be readable by others.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace exo::text {

/// A file that could not be read as asked; what() names the path and why.
class file_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The contents of the regular file at `path`, at most `max_bytes` bytes.
/// Throws file_error "WHAT PATH: PROBLEM" for a file that cannot be opened
/// (with the system's reason), one that is not a regular file (naming what
/// it is: a FIFO, a directory, a device...), or one larger than max_bytes
/// (also when it grows while being read). Never blocks on a FIFO.
std::string read_file(const std::string& path, std::uint64_t max_bytes,
                      const std::string& what = "file");

/// Whether `path` exists (any kind of file).
bool file_exists(const std::string& path);

/// Refuses (file_error) a secret file or folder that is not owned by this
/// user or has any of the `forbidden` permission bits: by default every
/// group and other bit (a key, a token); 022 for a folder others may read
/// but must not change (a state directory). The message says how to fix it
/// ("chmod 600 PATH", "chmod 700 DIR").
void check_private(const std::string& path, const std::string& what,
                   unsigned forbidden = 077);

/// Writes `text` to a new file at `path` created with mode 0600 (fails if
/// it exists); throws file_error.
void create_private(const std::string& path, const std::string& text,
                    const std::string& what);

/// The file a client (a console command, an API request) names, as a path
/// inside one of `dirs` (absolute folders the operator configured): a
/// relative name is looked up in each folder in turn, an absolute one must
/// lie inside one. Links are followed and the real path must stay inside
/// the folder. Throws file_error without touching a path outside the
/// folders, and with the same words for a missing file as for one outside
/// them, so that a client learns nothing of the node's other files.
/// `what` names the file in the message ("model", "problem file").
std::string resolve_client_file(const std::string& name,
                                const std::vector<std::string>& dirs,
                                const std::string& what);

/// The size text people read: "16 MiB", "64 KiB", "100 bytes".
std::string size_text(std::uint64_t bytes);

} // namespace exo::text
