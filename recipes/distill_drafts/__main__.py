"""``python -m recipes.distill_drafts <command>``: prompts, generate, train, evaluate (README.md here)."""

from recipes.distill_drafts.distill import main

main()
