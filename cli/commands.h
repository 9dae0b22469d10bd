#pragma once
// Each returns the process exit status: 0 ok, 1 runtime error (message printed), 2 usage error.
int cmd_generate(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_make_random(int argc, char **argv);
int cmd_quantize(int argc, char **argv);          // MLX affine weights (cli/cmd_quantize.c)
int cmd_rotate(int argc, char **argv);            // the R1 fold (cli/cmd_rotate.c)
int cmd_tokenize(int argc, char **argv);
int cmd_tokenizer_train(int argc, char **argv);
int cmd_draft_vocab(int argc, char **argv);
int cmd_tokenize_corpus(int argc, char **argv);   // tokenize --corpus (cli/cmd_tokenize_corpus.c)
int cmd_train_target(int argc, char **argv);
int cmd_train_drafter(int argc, char **argv);
int cmd_loss(int argc, char **argv);
int cmd_distill_corpus(int argc, char **argv);   // the target's greedy text as a corpus (cli/cmd_distill_corpus.c)
int cmd_calibrate(int argc, char **argv);
int cmd_serve(int argc, char **argv);        // the OpenAI-compatible HTTP server (server/)
int cmd_profile(int argc, char **argv);         // the schedulers' cost model (cli/cmd_profile.c)
