"""Language models on notes: private fine-tuning of causal LMs (``finetune``: DP-Full / DP-LoRA / DP-Prefix,
the patient as the unit; ``saved``: save and load), constrained generative NER (``generative_ner``),
greedy summaries (``summaries``), a MiniLM token tagger (``token_ner``) and membership attacks and canary
audits on fine-tuned LMs (``attacks``). Import the modules themselves (each loads torch)."""
