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
// U+009F, the 8-bit CSI) and every byte of invalid UTF-8 -> \xNN; a character that
// reorders or hides text (is_hidden_format_char: the bidi controls U+202A..U+202E,
// U+2066..U+2069, U+200E/F, U+061C, and every other format character (Cf) such as
// U+200B..U+200D, U+2060..U+2064, U+FEFF, U+00AD, plus the line and paragraph separators
// U+2028/U+2029) -> \uXXXX (\UXXXXXXXX above U+FFFF). The result is one line of printable
// text in logical order, so a name with a newline cannot print a line of its own and one
// with U+202E cannot reorder the line it is printed in.
std::string display_escape(std::string_view s);

// True for the code points display_escape writes as \u escapes (see above).
bool is_hidden_format_char(char32_t cp);

// How json_string_literal writes a string. `safe` (reports, hash manifests: JSON that
// ckptkit reads back or a terminal shows) writes DEL, C1 controls and the
// is_hidden_format_char set as \uXXXX escapes, so printed JSON cannot reorder or hide text
// (the parsed value is the same), and makes the byte escape below reversible. `exact`
// (files other tools read: a rewritten config.json, safetensors headers, the index; the
// records the whole-model hash is computed over) writes valid UTF-8 exactly as Python's
// json.dumps(ensure_ascii=False) does, escaping only '"', '\\' and C0.
enum class JsonText { exact, safe };

// The one JSON string literal (with its quotes) every JSON writer uses; the output is always
// valid UTF-8 JSON. A byte that is not part of valid UTF-8 cannot be held by a JSON
// string: it is written as the four characters \xHH (lowercase hex; as JSON text
// "\\xff"). In safe text a backslash that is followed in the input by 'x' and two lowercase
// hex digits is written \x5c, so the escape is reversible (json_unescape_bytes gives the
// exact bytes back); valid UTF-8 without such a backslash is unchanged (docs/formats.md).
std::string json_string_literal(std::string_view s, JsonText text = JsonText::safe);

// The inverse of json_string_literal's byte escape on a parsed JSON string: every \xHH
// (two lowercase hex digits) becomes the byte HH; everything else is kept.
std::string json_unescape_bytes(std::string_view s);

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
