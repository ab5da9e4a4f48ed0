// Human output that a hostile file cannot forge: every untrusted string (tensor names,
// keys, config strings, paths, messages that quote them) goes through display_escape
// before it reaches a terminal or a log, and every error line has one format.
#pragma once

#include <string>
#include <string_view>

#include "core/findings.h"

namespace ckpt {

// Valid UTF-8 text passes unchanged, except: ESC -> \x1b, newline -> \n, CR -> \r,
// tab -> \t, backslash -> \\, every other C0 control byte, DEL, a C1 control (U+0080..
// U+009F, the 8-bit CSI) and every byte of invalid UTF-8 -> \xNN. The result is one line
// of printable text, so a name with a newline cannot print a line of its own.
std::string display_escape(std::string_view s);

// A finding as human output prints it: "SEVERITY CODE FILE[@OFFSET] [TENSOR]: message",
// FILE "-" when it names none, every part escaped.
std::string finding_text(const Finding& f);
// The one human error line: "PROG SUB: SEVERITY CODE FILE[@OFFSET] [TENSOR]: message"
// (PROG SUB e.g. "ckpt validate", FILE "-" when the finding names none), escaped, no
// trailing newline.
std::string finding_line(std::string_view prog_sub, const Finding& f);
// The same for an error that is not a finding (a usage mistake, a refused output).
std::string error_line(std::string_view prog_sub, std::string_view code, std::string_view file,
                       std::string_view message);

}  // namespace ckpt
