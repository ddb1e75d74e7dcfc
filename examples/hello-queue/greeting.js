export function greeting(word, name) {
  return `${word ?? "hello"}, ${name}!`;
}
