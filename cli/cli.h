#pragma once
// The command-line conventions every FIKIT tool shares, on CLI11: `--x value` and `--x=value`, the
// last of a repeated option wins, `--help` and `--version` answer on stdout with exit 0, and a usage
// error is one line on stderr, "TOOL: error: WHAT (see TOOL --help)", with exit 2 and, for a
// mistyped option, the nearest one ("did you mean --listen?").
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fikit::cli {

constexpr int kUsage = 2;   // every tool's exit code for bad usage
constexpr int kGoOn = -1;   // parse(): the command line is good, run

// An app with the conventions above. `name` is the program name in messages ("fikit-run",
// "fikit-scheduler status"); `help` the text --help prints (the tools write their own, richer than
// a generated one).
std::unique_ptr<CLI::App> make_app(const std::string& name, std::string help);

// Parses argv. Returns kGoOn, or the exit code to leave with (0 after --help or --version, having
// printed them; kUsage after a usage error, having said why). With `command` (a prefix command such
// as fikit-run's PROGRAM ARGS), everything from the first positional argument, or after `--`, lands
// there; an unknown option before it is an error, not the program.
int parse(CLI::App& app, int argc, const char* const* argv, std::vector<std::string>* command = nullptr);

// parse() without printing: what the command line asks for, and on Error the reason in *error.
enum class Outcome { Run, Help, Version, Error };
Outcome try_parse(CLI::App& app, int argc, const char* const* argv, std::vector<std::string>* command,
                  std::string* error);

// "NAME (FIKIT) VERSION", what --version prints.
std::string version_line(const std::string& name);

// Says what is wrong the tools' way; returns kUsage.
int usage_error(const std::string& name, const std::string& what);

// The candidate nearest to `given` by edit distance when it is close enough to be a typo, else "".
// The commands of a tool that has them (fikit-scheduler status, keygen): an option spelt as one
// (`--status`) is answered with the command.
void declare_commands(const std::string& tool, std::vector<std::string> commands);
// `word` as a POSIX shell reads it back as one word: as it is when it holds nothing special, else
// in single quotes (a hint a user pastes: `fikit-profile show 'my service'`).
std::string shell_word(const std::string& word);
std::string nearest(const std::string& given, const std::vector<std::string>& candidates);

// A duration for people: "0", "500 ns", "20 us", "1.5 ms", "4.29 s", "3600 s" (three significant
// digits below 1000 of the unit).
std::string format_duration_ns(uint64_t ns);
// A duration as people write it: a whole number with ns, us, ms or s ("20us", "20 us"; a plain
// number is microseconds). False when it is not one or overflows.
bool parse_duration_ns(const std::string& text, uint64_t& out);
// A duration exactly, in the largest unit that divides it ("100ms", "1500us", "0us"): what
// parse_duration_ns reads back to the same value (a config file, a default in --help).
std::string exact_duration_ns(uint64_t ns);

// `text` wrapped at spaces into lines of at most `width` characters, each indented by `indent`
// spaces (the first by `first_indent`, when given) and ended by a newline (the tools' --help).
std::string wrapped(const std::string& text, size_t indent, size_t width = 100, size_t first_indent = SIZE_MAX);

}  // namespace fikit::cli
