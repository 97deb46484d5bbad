/* number: a whole string read as one decimal integer, the one rule for numbers given as text
 * (options, query values, environment variables): "12abc", "", or one past long long's range is
 * not a number, where atoi would read 12, 0 or a wrapped value. */
#ifndef PP_BASE_NUMBER_H
#define PP_BASE_NUMBER_H

/* 1 with *out set when s is all one base-10 integer (leading blanks and a sign allowed) that
 * fits a long long; 0 otherwise, *out untouched. */
int pp_parse_integer(const char *s, long long *out);

#endif
