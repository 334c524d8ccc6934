"""What serves models to people: the web chat (chat), the model zoo's verified installs
(model_zoo), release archives (packaging) and their model cards (model_card)."""
