#include "cli.h"

#include <charconv>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>

namespace fikit::cli {
namespace {

// The name the tool prints in messages, kept on the app (CLI11 has a name field for it).
const std::string& tool_name(const CLI::App& app) { return app.get_name(); }

// Insertions, deletions, substitutions and swaps of two neighbours ("shwo" is one edit from "show").
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::vector<std::string> long_option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options())
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
  return names;
}

std::map<std::string, std::vector<std::string>>& commands_of() {
  static std::map<std::string, std::vector<std::string>> commands;
  return commands;
}

// Words people reach for that the tools spell otherwise: the first of the listed options the tool has.
struct Synonym {
  const char* given;
  std::vector<const char*> meant;
};
const Synonym kSynonyms[] = {
    {"--port", {"--listen", "--scheduler"}}, {"--host", {"--listen", "--scheduler"}},
    {"--address", {"--listen", "--scheduler"}}, {"--key", {"--task-key"}}, {"--prio", {"--priority"}},
    {"--database", {"--db"}}, {"--limit", {"--memory-limit"}}};

// A typo (nearest), an abbreviation (the one option that starts with it), or a synonym.
std::string suggestion(const CLI::App& app, const std::string& flag) {
  const std::vector<std::string> names = long_option_names(app);
  if (std::string near = nearest(flag, names); !near.empty()) return near;
  std::string prefixed;
  for (const std::string& name : names)
    if (flag.size() >= 4 && name.rfind(flag, 0) == 0) {
      if (!prefixed.empty()) return {};   // ambiguous
      prefixed = name;
    }
  if (!prefixed.empty()) return prefixed;
  for (const Synonym& s : kSynonyms)
    if (flag == s.given)
      for (const char* meant : s.meant)
        if (std::find(names.begin(), names.end(), meant) != names.end()) return meant;
  return {};
}

std::string unknown_option(const CLI::App& app, const std::string& arg) {
  const std::string flag = arg.substr(0, arg.find('='));
  // A tool's commands are words, not options: `fikit-scheduler --status` means `fikit-scheduler status`.
  const std::string tool = app.get_name().substr(0, app.get_name().find(' '));
  if (auto it = commands_of().find(tool); it != commands_of().end())
    for (const std::string& command : it->second)
      if (flag == "--" + command)
        return "unknown option '" + flag + "'; did you mean the command '" + tool + " " + command + "'?";
  const std::string near = suggestion(app, flag);
  return "unknown option '" + flag + "'" + (near.empty() ? "" : "; did you mean " + near + "?");
}

}  // namespace

void declare_commands(const std::string& tool, std::vector<std::string> commands) {
  commands_of()[tool] = std::move(commands);
}

std::unique_ptr<CLI::App> make_app(const std::string& name, std::string help) {
  auto app = std::make_unique<CLI::App>(std::move(help), name);
  app->set_help_flag();   // ours below prints the tool's own text
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app->allow_extras();    // reported by parse() with a suggestion, not CLI11's wording
  app->add_flag("-h,--help")->description("show this help and exit");
  app->add_flag("--version")->description("show the version and exit");
  return app;
}

Outcome try_parse(CLI::App& app, int argc, const char* const* argv, std::vector<std::string>* command,
                  std::string* error) {
  // CLI11 takes an empty `--x=` as `--x` and the next word as its value: `--task-key="$KEY"` with KEY
  // unset would make the program the key. Refused before parsing, up to the program (if any).
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') {
      if (command != nullptr) break;   // the program: what follows is its own
      continue;
    }
    const size_t eq = arg.find('=');
    const CLI::Option* option = app.get_option_no_throw(arg.substr(0, eq));
    if (option == nullptr || option->get_expected_min() == 0) continue;   // unknown (said later) or a switch
    if (eq == arg.size() - 1) {
      *error = arg.substr(0, eq) + " needs a value";
      return Outcome::Error;
    }
    if (eq == std::string::npos) ++i;   // its value is the next word
  }
  if (command != nullptr) app.prefix_command();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ArgumentMismatch& e) {
    // CLI11 says "--db: 1 required TEXT missing" (the option's name before the colon), or of a
    // switch given a value, "fast was given a disallowed flag override".
    const std::string what = e.what();
    const size_t override_at = what.find(" was given a disallowed flag override");
    *error = override_at != std::string::npos ? "--" + what.substr(0, override_at) + " takes no value"
                                              : what.substr(0, what.find(':')) + " needs a value";
    return Outcome::Error;
  } catch (const CLI::ParseError& e) {
    *error = e.what();
    return Outcome::Error;
  }
  if (app.count("--help") > 0) return Outcome::Help;
  if (app.count("--version") > 0) return Outcome::Version;
  std::vector<std::string> rest = app.remaining();
  if (command != nullptr) {
    if (!rest.empty() && rest.front() == "--") {
      rest.erase(rest.begin());
    } else if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-') {
      *error = unknown_option(app, rest.front());
      return Outcome::Error;
    }
    *command = std::move(rest);
    return Outcome::Run;
  }
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());   // what follows is positional
  if (rest.empty()) return Outcome::Run;
  const std::string& arg = rest.front();
  *error = arg.size() > 1 && arg[0] == '-' ? unknown_option(app, arg) : "unexpected argument '" + arg + "'";
  return Outcome::Error;
}

int parse(CLI::App& app, int argc, const char* const* argv, std::vector<std::string>* command) {
  std::string error;
  switch (try_parse(app, argc, argv, command, &error)) {
    case Outcome::Run:
      return kGoOn;
    case Outcome::Help:
      std::fputs(app.get_description().c_str(), stdout);
      return 0;
    case Outcome::Version:
      std::puts(version_line(tool_name(app)).c_str());
      return 0;
    case Outcome::Error:
      break;
  }
  return usage_error(tool_name(app), error);
}

std::string version_line(const std::string& name) { return name + " (FIKIT) " FIKIT_VERSION; }

int usage_error(const std::string& name, const std::string& what) {
  std::fprintf(stderr, "%s: error: %s (see %s --help)\n", name.c_str(), what.c_str(), name.c_str());
  return kUsage;
}

std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_-.:/=+,@%", c) != nullptr;
  });
  if (plain) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string nearest(const std::string& given, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(given, c);
    if (d < best_distance) best_distance = d, best = c;
  }
  // A typo is a few edits, and fewer than half the word: "--lisen" is "--listen", "--x" is nothing.
  return best_distance <= 3 && best_distance * 2 < std::max<size_t>(given.size(), 1) ? best : std::string();
}

bool parse_duration_ns(const std::string& text, uint64_t& out) {
  constexpr uint64_t kUs = 1'000, kMs = 1'000'000, kS = 1'000'000'000;
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr == text.data()) return false;
  std::string unit(ptr, text.data() + text.size());
  if (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);   // "20 us", as --help and messages write them
  uint64_t scale = 0;
  if (unit.empty() || unit == "us") scale = kUs;
  else if (unit == "ns") scale = 1;
  else if (unit == "ms") scale = kMs;
  else if (unit == "s") scale = kS;
  else return false;
  if (value > UINT64_MAX / scale) return false;
  out = value * scale;
  return true;
}

std::string exact_duration_ns(uint64_t ns) {
  constexpr uint64_t kUs = 1'000, kMs = 1'000'000, kS = 1'000'000'000;
  if (ns != 0 && ns % kS == 0) return std::to_string(ns / kS) + "s";
  if (ns != 0 && ns % kMs == 0) return std::to_string(ns / kMs) + "ms";
  if (ns % kUs == 0) return std::to_string(ns / kUs) + "us";
  return std::to_string(ns) + "ns";
}

std::string wrapped(const std::string& text, size_t indent, size_t width, size_t first_indent) {
  std::string out, line;
  size_t at = 0;
  auto margin = [&] { return out.empty() && first_indent != SIZE_MAX ? first_indent : indent; };
  while (at < text.size()) {
    const size_t space = text.find(' ', at);
    const std::string word = text.substr(at, space == std::string::npos ? std::string::npos : space - at);
    if (!line.empty() && margin() + line.size() + 1 + word.size() > width) {
      out += std::string(margin(), ' ') + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    at = space == std::string::npos ? text.size() : space + 1;
  }
  if (!line.empty()) out += std::string(margin(), ' ') + line + "\n";
  return out;
}

std::string format_duration_ns(uint64_t ns) {
  if (ns == 0) return "0";
  static constexpr struct { uint64_t scale; const char* unit; } kUnits[] = {
      {1'000'000'000, "s"}, {1'000'000, "ms"}, {1'000, "us"}, {1, "ns"}};
  for (const auto& u : kUnits) {
    if (ns < u.scale) continue;
    char text[32];
    const double value = double(ns) / double(u.scale);
    std::snprintf(text, sizeof text, value < 1000 ? "%.3g %s" : "%.0f %s", value, u.unit);
    return text;
  }
  return std::to_string(ns) + " ns";
}

}  // namespace fikit::cli
