// gpt from C++: a GPT-2-style decoder (causal blocks, learned positions, the output layer tied to
// the token embedding) trained as a word-level language model on a corpus in WikiText's layout,
// the run configured in code. The default strategy cuts it into one pipeline stage per worker: the
// last stage keeps a copy of the tied weight and the two stages that hold it all-reduce its
// gradient; data_parallel and zero hold it once. The run folder's results.json reports perplexity.
//   dtrain launch --nproc-per-node 2 -- example_gpt_wikitext DATA_ROOT [STRATEGY]   (default pipeline)
//   e.g. DATA_ROOT = tests/data/wikitext_sample (bundled) or an unpacked wikitext-2 folder
#include <cstdio>
#include <string>

#include "dtrain/run/Run.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: example_gpt_wikitext DATA_ROOT [STRATEGY]\n");
    return 2;
  }
  dtrain::config::RunConfig config;
  config.name = "gpt-wikitext";
  config.data.dataset = "wikitext";
  config.data.root = argv[1];
  config.data.seq_len = 32;
  config.data.batch_size = 16;
  config.data.eval_batch_size = 16;
  config.model.name = "gpt";
  config.model.dim = 64;
  config.model.depth = 2;
  config.model.heads = 4;
  config.model.mlp_ratio = 4.0;
  config.optim.name = "adamw";
  config.optim.lr = 0.002;
  config.optim.weight_decay = 0.01;
  config.train.epochs = 6;
  config.train.eval_at_start = true;
  config.train.checkpoint_every_epochs = 0;
  config.parallel.strategy = argc > 2 ? argv[2] : "pipeline";
  return dtrain::run::train(config);
}
