// unicode_classes.h: the character classes of GPT-2's pre-tokenization pattern (\p{L}, \p{N}, \s), as
// tables generated from Unicode's database (unicode_classes.c, scripts/gen-unicode-classes.py).
#pragma once
#include <stdint.h>

int fsdp_unicode_is_letter(uint32_t cp);  // general category L (\p{L})
int fsdp_unicode_is_number(uint32_t cp);  // general category N (\p{N})
int fsdp_unicode_is_space(uint32_t cp);   // white space (\s in the pattern)
