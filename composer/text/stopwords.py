"""Function words per language, in normalized form (see ``normalize``), so they match normalized tokens.

Persian verbs with the ``می‌`` prefix are listed whole: normalization drops the ZWNJ, so they are one token.
"""

from __future__ import annotations

from composer.text.normalize import normalize

_AR = """
في من على إلى الى عن مع هذا هذه ذلك تلك التي الذي الذين اللذين اللتين اللواتي هو هي هم هن أنت انت أنا انا نحن
كان كانت يكون تكون كانوا قد لقد لم لن لا ما ماذا متى أين اين كيف كم هل أو او ثم بل إن ان أن إذا اذا لكن
كل بعض غير بين عند حتى منذ خلال بعد قبل حول ضد عبر لدى و ف ب ل ك يا أي اي التى الى ايضا أيضا حيث وهو وهي
وقد وكان وكانت فيه فيها منه منها عليه عليها إليه اليه له لها لهم به بها تم هناك هنا كما ولا وما وفي ومن
إلا أما أم سوف ليس ليست كذلك هؤلاء أولئك مثل عندما بينما لأن مما عما إذ هما كانا يكن فيهم منهم عليهم بهم
نحو أمام فوق تحت ومع وعلى وإلى وعن فإن وأن بأن كأن أنه أنها إنه إنها وهذا وهذه ذات أحد إحدى
"""
_FA = """
و در به از که این آن را با برای است بود شد شده می نمی ها های یا تا هم هر اما اگر چه چرا کجا کی چگونه چند
آیا ای او ما شما آنها ایشان من تو خود نیز بر پس پیش روی زیر بین دیگر همه هیچ یک بی باید شود کرد کند کرده
خواهد دارد داشت هست نیست بوده باشد وی ولی چون زیرا همین همان آنچه اینکه چنین چیست کدام توسط
اینها آنان هستند بودند شدند کردند کنند دهد داد می‌شود می‌شوند می‌کند می‌کنند می‌باشد نمی‌شود
"""
_EN = """
a an the and or but if then else of to in on at by for with from as is are was were be been being it its this
that these those he she they we you i me him her them us my your his their our what which who whom whose when
where why how do does did done not no nor so than too very can could will would shall should may might must
have has had having there here about into over under again further once all any both each few more most other
some such only own same just also
"""

STOPWORDS: dict[str, frozenset[str]] = {
    lang: frozenset(normalize(w, lang) for w in words.split())
    for lang, words in (("ar", _AR), ("fa", _FA), ("en", _EN))
}
