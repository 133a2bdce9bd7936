"""Training data: conversation rows, chat-template rendering, loss masks, packing,
findings and prepared token rows. Depends only on tokenizers/transformers."""
