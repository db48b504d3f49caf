// not UTF-8: ÿþ
