#pragma once
// "--name value" / "--name=value" / "--switch" flags for the example programs, on the tools' CLI11
// conventions (cli/cli.h), with a --help text generated from the registered flags and their defaults.
#include <cstdint>
#include <string>
#include <vector>

namespace fikit::examples {

class Flags {
 public:
  Flags(std::string usage_line, std::string summary);

  // Registers a flag bound to `value`; its current value is the default shown by --help.
  void add(std::string name, uint64_t* value, std::string help);
  void add(std::string name, double* value, std::string help);    // rejects negative values
  void add_switch(std::string name, bool* value, std::string help);
  // A word from `choices` (e.g. --arrival closed|poisson); anything else is an error.
  void add_choice(std::string name, std::string* value, std::vector<std::string> choices, std::string help);

  enum class Outcome { Ok, Help, Version, Error };
  // Parses argv[1..] as every FIKIT tool does (cli/cli.h). Error leaves a one-line reason in
  // *error; Help and Version mean --help or --version was given.
  Outcome try_parse(int argc, const char* const* argv, std::string* error);
  // try_parse plus the usual handling: --help prints help_text() and --version the version, exit 0;
  // an error prints "<program>: error: <reason> (see <program> --help)" and exits kExitUsage.
  void parse(int argc, char** argv);

  std::string help_text() const;

  // For checks across flags after parse(): prints "<program>: <reason>" and exits kExitUsage.
  [[noreturn]] static void fail(const std::string& reason);

 private:
  enum class Kind { Count, Number, Switch, Choice };
  struct Flag {
    std::string name;
    Kind kind;
    void* value;
    std::string help;
    std::string default_text;
    std::vector<std::string> choices;   // Kind::Choice only
  };
  bool assign(const Flag& flag, const std::string& text, std::string* error) const;

  std::string usage_line_;
  std::string summary_;
  std::vector<Flag> flags_;
};

}  // namespace fikit::examples
