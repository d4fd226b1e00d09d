// Note [What a configuration file may be]: every configuration file is read under one rule (size,
// UTF-8, one document, at least one setting), each refusal naming the file and the line.
#include "dtrain/config/YamlFile.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/RunConfigYaml.h"
#include "support/ScratchDir.h"

namespace dtrain::config {
namespace {

class YamlFile : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const auto path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // The ConfigError's what() for loading `path`, or "" if it loads.
  static std::string error_of(const std::string& path) {
    try {
      load_yaml_file(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }

  dtrain::testing::ScratchDir dir_;
};

TEST_F(YamlFile, InvalidUtf8IsRefusedAtItsLine) {
  const auto path = write("latin1.yaml", "name: ok\nout_dir: caf\xe9\n");
  EXPECT_EQ(error_of(path), path + ":2: not valid UTF-8 (byte 0xe9); save the file as UTF-8");
  // Overlong forms and surrogates are not UTF-8 either; real multi-byte text is.
  EXPECT_NE(error_of(write("overlong.yaml", "name: \xc0\xaf\n")), "");
  EXPECT_NE(error_of(write("surrogate.yaml", "name: \xed\xa0\x80\n")), "");
  EXPECT_EQ(error_of(write("utf8.yaml", "name: caf\xc3\xa9-\xe2\x82\xac-\xf0\x9f\x98\x80\n")), "");
}

// yaml-cpp 0.7's LoadAll never returns on this (Note [Counting documents without LoadAll]). 0.7
// refuses it as a second document; 0.8 (Debian sid's) parses far enough to find the comma.
TEST_F(YamlFile, AStreamYamlCppCannotEndIsRefusedNotLoopedOn) {
  const auto path = write("comma.yaml", "train:\n  epochs: 1\n---\n,train:\n");
  const auto error = error_of(path);
  EXPECT_TRUE(error == path + ":4: a second YAML document (after '---'); a configuration is one document" ||
              error == path + ":4: invalid YAML: plain value cannot start with flow indicator character")
      << error;
}

TEST_F(YamlFile, ASecondDocumentIsRefusedAtItsLine) {
  const auto path = write("two.yaml", "name: a\n---\nname: b\n");
  EXPECT_EQ(error_of(path),
            path + ":3: a second YAML document (after '---'); a configuration is one document");
  EXPECT_EQ(error_of(write("one.yaml", "---\nname: a\n")), "");
}

TEST_F(YamlFile, AnUnterminatedQuoteIsRefusedAtItsLine) {
  const auto path = write("quote.yaml", "model: {name: mlp}\nname: \"abc\n");
  EXPECT_EQ(error_of(path),
            path + ":2: a quoted string that is never closed (no matching \" before the end of the file)");
  EXPECT_NE(error_of(write("single.yaml", "name: 'abc\n")), "");
  EXPECT_NE(error_of(write("escaped.yaml", "name: \"abc\\\"\n")), "");  // the only quote is escaped
  // Closed quotes, escapes and '' inside single quotes are fine, in keys and in lists too.
  EXPECT_EQ(error_of(write("closed.yaml", "name: \"a\\\"b\"\n\"out_dir\": 'it''s'\nx: [\"1\", '2']\n")), "");
}

// Note [Where an unclosed quote opens]: in a flow collection yaml-cpp fails at the end of the file;
// the error names the line where the quote opens, past quotes in comments, plain scalars, other
// quoted scalars and block scalars.
TEST_F(YamlFile, AnUnterminatedQuoteInAFlowCollectionIsRefusedWhereItOpens) {
  std::string after;
  for (int i = 0; i < 20; ++i) after += "k" + std::to_string(i) + ": " + std::to_string(i) + "\n";
  const std::string before =
      "# a comment's \" quote\n"         // 1
      "title: it's \"plain\"\n"          // 2
      "note: 'say \"hi\", it''s [ok'\n"  // 3
      "escaped: \"a \\\" [b\"\n"         // 4
      "text: |\n"                        // 5
      "  a block's \" quote\n"           // 6
      "folded: >-\n"                     // 7
      "  [ \" '\n";                      // 8
  const auto twice = write("double.yaml", before + "model: {name: mlp, layers: [8, \"abc, 4]}\n" + after);
  EXPECT_EQ(error_of(twice),
            twice + ":9: a quoted string that is never closed (no matching \" before the end of the file)");
  const auto once = write("single.yaml", before + "data:\n  sizes: [1, 'abc, 2]\n" + after);
  EXPECT_EQ(error_of(once),
            once + ":10: a quoted string that is never closed (no matching ' before the end of the file)");
  // Without the stray quote the file is fine; an error before the quote keeps yaml-cpp's line.
  EXPECT_EQ(error_of(write("fine.yaml", before + "model: {name: mlp, layers: [8, \"abc\", 4]}\n" + after)),
            "");
  const auto earlier = write("earlier.yaml", "a: b: c\n" + after + "x: [\"abc\n");
  EXPECT_EQ(error_of(earlier), earlier + ":1: invalid YAML: illegal map value");
}

// yaml-cpp takes the end of the file as the closing quote of a scalar after an anchor or a tag too.
TEST_F(YamlFile, AnUnterminatedQuoteAfterAnAnchorOrTagIsRefusedAtItsLine) {
  const auto tagged = write("tagged.yaml", "a: 1\nname: !!str \"abc\nb: [1]\n");
  EXPECT_EQ(error_of(tagged),
            tagged + ":2: a quoted string that is never closed (no matching \" before the end of the file)");
  const auto anchored = write("anchored.yaml", "a: 1\nname: &n 'abc\nb: [1]\n");
  EXPECT_EQ(error_of(anchored),
            anchored + ":2: a quoted string that is never closed (no matching ' before the end of the file)");
  EXPECT_EQ(error_of(write("closed.yaml", "a: 1\nname: &n !!str \"abc\"\nb: *n\n")), "");
}

TEST_F(YamlFile, AFileWithNoSettingsIsRefused) {
  for (const std::string text : {"", "\n\n", "# only a comment\n"}) {
    const auto path = write("empty.yaml", text);
    EXPECT_EQ(error_of(path), path +
                                  ": holds no settings (empty, or only comments); give at least one key, or "
                                  "leave the file out to use the defaults")
        << text;
  }
}

TEST_F(YamlFile, AFileOverTheSizeLimitIsRefusedBeforeItIsParsed) {
  const auto path = write("big.yaml", "name: x\n# " + std::string(kMaxConfigBytes, 'a') + "\n");
  EXPECT_NE(error_of(path).find("a configuration file is at most 1048576"), std::string::npos)
      << error_of(path);
}

// Note [YAML bombs]: ten levels of ten aliases are refused at the line where the expansion passes
// the budget, before anything walks the document; aliases within it are fine.
TEST_F(YamlFile, AliasesThatExpandBeyondTheBudgetAreRefusedAtTheirLine) {
  std::string bomb = "name: bomb\nl0: &l0 [a, a, a, a, a, a, a, a, a, a]\n";
  for (int i = 1; i < 10; ++i) {
    bomb += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k ? ", *l" : "*l") + std::to_string(i - 1);
    bomb += "]\n";
  }
  const auto path = write("bomb.yaml", bomb);
  // l0 holds 11 values, l1 111, ... l4 111,111: the fifth level's line (line 6) passes 100,000.
  EXPECT_EQ(error_of(path),
            path +
                ":6: YAML aliases here expand the document beyond 100000 values (aliases of "
                "aliases multiply); a configuration needs far fewer: write the values out or use "
                "fewer levels of aliases");
  EXPECT_EQ(error_of(write("alias.yaml", "name: a\nshape: &s [1, 8, 8]\nother: *s\n")), "");
}

TEST_F(YamlFile, NestingDeeperThanTheLimitIsRefusedAsSuch) {
  const auto deep =
      write("deep.yaml", "name: deep\ndata: " + std::string(3000, '[') + std::string(3000, ']') + "\n");
  EXPECT_EQ(
      error_of(deep),
      deep +
          ":2: nested more than 64 levels deep; a configuration nests a few levels (is it the right file?)");
  EXPECT_EQ(
      error_of(write("fine.yaml", "name: a\ndata: " + std::string(60, '[') + std::string(60, ']') + "\n")),
      "");
}

TEST_F(YamlFile, AKeyThatIsNotANameIsRefusedWithItsLine) {
  const auto root = parse_yaml("runs:\n  - [name]: a\n", "e.yaml");
  const auto entry = root["runs"][0];
  try {
    for (const auto& field : entry) key_text("e.yaml", field.first, "runs");
    FAIL() << "a list was taken as a key";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "e.yaml:2: runs: a key that is a list; keys are names, e.g. lr: 0.1");
  }
}

TEST_F(YamlFile, RunNamesHoldNoControlCharacters) {
  try {
    parse_run_config("name: \"a\\tb\"\n", "tab.yaml", {});
    FAIL() << "a tab in the run name was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.where(), "tab.yaml:1");
    EXPECT_NE(e.message().find("without '/' or control characters"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::config
