"""Composer: find the best RAG configuration for a corpus and question set, Arabic and Persian first-class.

One package per stage of the data's path; see README.md for the map. Nothing heavy is imported here.
"""
