"""SavedModel exports: the TF Hub encoder and preprocessing models, and the task models
that answer raw text with each task's pre- and post-processing in-graph.

Floors: `serving` imports `modeling`, `evaluation` and `data_prep`, never a runner;
runners, `export_tfhub.py` and `extract_features.py` import `serving`.

Loading an export that tokenizes (preprocessing, task exports) needs `import
tensorflow_text` first. A malformed request (inputs of different batch sizes, malformed
segments) fails with tf.errors.InvalidArgumentError naming its inputs, never a crash;
docs/serving.md has the calls, answers and figures.

  savedmodel.py     writing: export-path rules, the marker of our exports, atomic save
  encoder.py        the TF Hub encoder (reusable SavedModel, optional `mlm`)
  preprocessing.py  the TF Hub preprocessing model (`tokenize`, `bert_pack_inputs`)
  inputs.py         raw-text signature inputs: specs, request checks, tokenizing words,
                    packing text, cutting a packed batch to its longest input
  windows.py        windows over long inputs and their max-context choice, in-graph
  model_call.py     the model call of the task exports: the cut, and XLA for requests
                    of one example (option xla_single_requests)
  classifier.py     classification, regression and multiple-choice signatures
  squad.py          SQuAD span answers in-graph (the runner's post-processing)
  ner.py            one IOB2 tag per word in-graph
  exports.py        the registry of task exports and `export_task_model` (tasks.py: its
                    older import path)
"""
