"""Model evaluation on a counterfactual dataset (paper §4.2): zero-shot image-text retrieval R@k over both images and
both captions of every pair (`retrieval`), image-text matching score differences against a random real pair and
the counterfactual (`itm`), with open_clip and Hugging Face image-text models (`scorers`).

May import: `tasks.core`, `tasks.image.scoring` (the open_clip loader), `tasks.evaluation`.
"""
