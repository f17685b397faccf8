// Package web will hold the admin dashboard's templ components and static
// assets, embedded into the admin binary. Built in a later issue.
package web
