// Greedy decoding with llama.cpp's CPU backend, printed as JSON for Kvasir's tests:
//   llama-greedy model.gguf "prompt" [n=32] [add_special=1]
// (add_special 0 for a prompt a chat template rendered, which carries its own bos; special
// tokens' text is parsed as those tokens either way)
// {"prompt_tokens":[...],"tokens":[...],"margins":[...],"first_logits":[...]}
// `margins` is each step's top-1 minus top-2 logit (how far a greedy choice is from a tie);
// `first_logits` the logits after the prompt (the distribution a KL check compares). Built by
// build.sh against the static libraries of the same build.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

static void quiet(enum ggml_log_level, const char *, void *) {}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s model.gguf prompt [n] [add_special]\n", argv[0]);
    return 2;
  }
  const int n_predict = argc > 3 ? atoi(argv[3]) : 32;
  const bool add_special = argc > 4 ? atoi(argv[4]) != 0 : true;
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model *model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  const llama_vocab *vocab = llama_model_get_vocab(model);
  const std::string prompt = argv[2];
  const int n_prompt = -llama_tokenize(vocab, prompt.c_str(), prompt.size(), nullptr, 0, add_special, true);
  std::vector<llama_token> toks(n_prompt);
  if (llama_tokenize(vocab, prompt.c_str(), prompt.size(), toks.data(), n_prompt, add_special, true) < 0) return 1;

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n_prompt + n_predict + 8;
  cp.n_batch = cp.n_ctx;
  cp.n_threads = 1;  // one thread: the same reduction order on every run
  cp.n_threads_batch = 1;
  cp.no_perf = true;
  llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;

  const int n_vocab = llama_vocab_n_tokens(vocab);
  std::vector<llama_token> out;
  std::vector<float> margins, first;
  llama_batch batch = llama_batch_get_one(toks.data(), toks.size());
  llama_token tok;
  for (int step = 0; step < n_predict; step++) {
    if (llama_decode(ctx, batch) != 0) return 1;
    const float *logits = llama_get_logits_ith(ctx, -1);
    if (step == 0) first.assign(logits, logits + n_vocab);
    int best = 0;
    for (int i = 1; i < n_vocab; i++) if (logits[i] > logits[best]) best = i;
    float second = -1e30f;
    for (int i = 0; i < n_vocab; i++) if (i != best && logits[i] > second) second = logits[i];
    tok = best;
    out.push_back(tok);
    margins.push_back(logits[best] - second);
    batch = llama_batch_get_one(&tok, 1);
  }
  printf("{\"prompt_tokens\":[");
  for (size_t i = 0; i < toks.size(); i++) printf("%s%d", i ? "," : "", toks[i]);
  printf("],\"tokens\":[");
  for (size_t i = 0; i < out.size(); i++) printf("%s%d", i ? "," : "", out[i]);
  printf("],\"margins\":[");
  for (size_t i = 0; i < margins.size(); i++) printf("%s%.6g", i ? "," : "", margins[i]);
  printf("],\"first_logits\":[");
  for (size_t i = 0; i < first.size(); i++) printf("%s%.9g", i ? "," : "", first[i]);
  printf("]}\n");
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
