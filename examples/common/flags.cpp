#include "flags.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cli.h"
#include "cuda_check.h"

namespace fikit::examples {
namespace {

std::string format_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

Flags::Flags(std::string usage_line, std::string summary)
    : usage_line_(std::move(usage_line)), summary_(std::move(summary)) {}

void Flags::add(std::string name, uint64_t* value, std::string help) {
  flags_.push_back({std::move(name), Kind::Count, value, std::move(help), std::to_string(*value), {}});
}

void Flags::add(std::string name, double* value, std::string help) {
  flags_.push_back({std::move(name), Kind::Number, value, std::move(help), format_number(*value), {}});
}

void Flags::add_switch(std::string name, bool* value, std::string help) {
  flags_.push_back({std::move(name), Kind::Switch, value, std::move(help), *value ? "on" : "off", {}});
}

void Flags::add_choice(std::string name, std::string* value, std::vector<std::string> choices, std::string help) {
  flags_.push_back({std::move(name), Kind::Choice, value, std::move(help), *value, std::move(choices)});
}

bool Flags::assign(const Flag& flag, const std::string& text, std::string* error) const {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  if (flag.kind == Kind::Count) {
    // strtoull accepts "-1" (wrapping it), so a sign is rejected before converting.
    const unsigned long long v = std::strtoull(begin, &end, 10);
    if (text.empty() || text[0] == '-' || text[0] == '+' || *end != '\0' || errno == ERANGE) {
      *error = "--" + flag.name + " needs a non-negative integer, got '" + text + "'";
      return false;
    }
    *static_cast<uint64_t*>(flag.value) = v;
  } else if (flag.kind == Kind::Choice) {
    std::string list;
    for (const std::string& c : flag.choices) {
      if (c == text) {
        *static_cast<std::string*>(flag.value) = text;
        return true;
      }
      list += (list.empty() ? "" : "|") + c;
    }
    *error = "--" + flag.name + " needs one of " + list + ", got '" + text + "'";
    return false;
  } else {
    const double v = std::strtod(begin, &end);
    if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < 0) {
      *error = "--" + flag.name + " needs a non-negative number, got '" + text + "'";
      return false;
    }
    *static_cast<double*>(flag.value) = v;
  }
  return true;
}

Flags::Outcome Flags::try_parse(int argc, const char* const* argv, std::string* error) {
  // The conventions of every FIKIT tool (cli/cli.h); the values are checked here, by kind.
  auto app = cli::make_app(program_name(), help_text());
  std::vector<std::string> texts(flags_.size());
  std::vector<bool> switches(flags_.size());
  for (size_t i = 0; i < flags_.size(); ++i) {
    if (flags_[i].kind == Kind::Switch) {
      app->add_flag_function("--" + flags_[i].name, [&switches, i](int64_t) { switches[i] = true; })
          ->disable_flag_override();
    } else {
      app->add_option("--" + flags_[i].name, texts[i]);
    }
  }
  switch (cli::try_parse(*app, argc, argv, nullptr, error)) {
    case cli::Outcome::Help:
      return Outcome::Help;
    case cli::Outcome::Version:
      return Outcome::Version;
    case cli::Outcome::Error:
      return Outcome::Error;
    case cli::Outcome::Run:
      break;
  }
  for (size_t i = 0; i < flags_.size(); ++i) {
    if (app->count("--" + flags_[i].name) == 0) continue;
    if (flags_[i].kind == Kind::Switch) *static_cast<bool*>(flags_[i].value) = switches[i];
    else if (!assign(flags_[i], texts[i], error)) return Outcome::Error;
  }
  return Outcome::Ok;
}

void Flags::parse(int argc, char** argv) {
  set_program_name(argc > 0 ? argv[0] : nullptr);
  std::string error;
  switch (try_parse(argc, argv, &error)) {
    case Outcome::Ok:
      return;
    case Outcome::Help:
      std::fputs(help_text().c_str(), stdout);
      std::exit(0);
    case Outcome::Version:
      std::puts(cli::version_line(program_name()).c_str());
      std::exit(0);
    case Outcome::Error:
      fail(error);
  }
}

void Flags::fail(const std::string& reason) { std::exit(cli::usage_error(program_name(), reason)); }

std::string Flags::help_text() const {
  std::string text = "Usage: " + usage_line_ + "\n" + summary_ + "\n\nOptions:\n";
  for (const Flag& f : flags_) {
    std::string left = "  --" + f.name;
    if (f.kind == Kind::Choice) {
      left += ' ';
      for (size_t i = 0; i < f.choices.size(); ++i) left += (i ? "|" : "") + f.choices[i];
    } else if (f.kind != Kind::Switch) {
      left += " N";
    }
    if (left.size() < 24) left.resize(24, ' ');
    text += left + " " + f.help + " (default " + f.default_text + ")\n";
  }
  text += "  --help                 show this help and exit\n";
  text += "  --version              show the version and exit\n";
  return text;
}

}  // namespace fikit::examples
