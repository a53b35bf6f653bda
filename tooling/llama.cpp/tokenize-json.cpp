// llama.cpp's tokenizer on a GGUF file's vocabulary (loaded with vocab_only), as JSON for
// Kvasir's tokenizer fixtures:
//   llama-tokenize-json vocab.gguf < texts
// with the texts separated by "\n__ggml_vocab_test__\n" (the format of llama.cpp's
// models/ggml-vocab-*.gguf.inp files). Prints
// [{"add_special":[...],"no_add_special":[...],"detokenized":"..."}, ...]: per text, the ids
// with and without add_special (the bos token the vocabulary asks for), special tokens' text in
// the input parsed as those tokens in both (parse_special: what a prompt rendered by a chat
// template needs), and the text llama.cpp makes of the no_add_special ids (special tokens kept).
// Built by build.sh against the static libraries of the same build.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "llama.h"

static void quiet(enum ggml_log_level, const char *, void *) {}

static std::vector<llama_token> tokenize(const llama_vocab *vocab, const std::string &text, bool add_special) {
  const int n = -llama_tokenize(vocab, text.c_str(), text.size(), nullptr, 0, add_special, true);
  std::vector<llama_token> toks(n > 0 ? n : 0);
  if (n > 0 && llama_tokenize(vocab, text.c_str(), text.size(), toks.data(), n, add_special, true) < 0) {
    fprintf(stderr, "tokenize failed\n");
    exit(1);
  }
  return toks;
}

static std::string detokenize(const llama_vocab *vocab, const std::vector<llama_token> &ids) {
  std::string text(ids.size() * 16 + 16, '\0');
  int n = llama_detokenize(vocab, ids.data(), ids.size(), text.data(), text.size(), false, true);
  if (n < 0) {
    text.resize(-n);
    n = llama_detokenize(vocab, ids.data(), ids.size(), text.data(), text.size(), false, true);
  }
  text.resize(n);
  return text;
}

static void print_string(const std::string &s) {
  putchar('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

static void print_ids(const std::vector<llama_token> &ids) {
  printf("[");
  for (size_t i = 0; i < ids.size(); i++) printf("%s%d", i ? "," : "", ids[i]);
  printf("]");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s vocab.gguf < texts\n", argv[0]);
    return 2;
  }
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model *model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  const llama_vocab *vocab = llama_model_get_vocab(model);

  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t start = 0;
  for (size_t at; (at = input.find(sep, start)) != std::string::npos; start = at + sep.size()) {
    texts.push_back(input.substr(start, at - start));
  }
  if (start < input.size()) texts.push_back(input.substr(start));

  printf("[");
  for (size_t i = 0; i < texts.size(); i++) {
    printf("%s\n{\"add_special\":", i ? "," : "");
    print_ids(tokenize(vocab, texts[i], true));
    printf(",\"no_add_special\":");
    const std::vector<llama_token> ids = tokenize(vocab, texts[i], false);
    print_ids(ids);
    printf(",\"detokenized\":");
    print_string(detokenize(vocab, ids));
    printf("}");
  }
  printf("\n]\n");
  llama_model_free(model);
  return 0;
}
